// Routing for typed clients (README: Routing clients): a query that reads by key goes straight
// to a replica of the key's partition, skipping the hop a node makes for a key it does not
// hold, as Kafka Streams' metadata-aware clients do. The partition map comes from GET /cluster
// on any node; partitions from Kafka's default partitioner (murmur2 over the serializer's
// bytes). The same rules as clients/python/routing.py:
// - a request whose root fields read by key (the map's routes) goes to the node holding most
//   of their partitions, the active replica first; anything else to the URL given;
// - a node that cannot be reached is skipped for DOWN_FOR_MS, the request sent to the next
//   replica and then any node, and the map read again;
// - an answer whose stategate-assignment header is newer than the map has it read again.
// Routing only chooses where a request goes: any node answers any query.
import {
  Kind,
  parse,
  valueFromASTUntyped,
  type DocumentNode,
  type FieldNode,
  type SelectionSetNode,
  type ValueNode,
} from "graphql";

const ASSIGNMENT_HEADER = "stategate-assignment";
const DOWN_FOR_MS = 5_000;

/** Kafka's murmur2 (seed 0x9747b28c), as the unsigned 32 bits of Java's int. */
export function murmur2(data: Uint8Array): number {
  const m = 0x5bd1e995;
  const length = data.length;
  let h = (0x9747b28c ^ length) >>> 0;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = (data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24)) >>> 0;
    k = Math.imul(k, m) >>> 0;
    k = (k ^ (k >>> 24)) >>> 0;
    k = Math.imul(k, m) >>> 0;
    h = (Math.imul(h, m) ^ k) >>> 0;
  }
  const tail = length & 3;
  if (tail === 3) h = (h ^ (data[whole + 2]! << 16)) >>> 0;
  if (tail >= 2) h = (h ^ (data[whole + 1]! << 8)) >>> 0;
  if (tail >= 1) {
    h = (h ^ data[whole]!) >>> 0;
    h = Math.imul(h, m) >>> 0;
  }
  h = (h ^ (h >>> 13)) >>> 0;
  h = Math.imul(h, m) >>> 0;
  return (h ^ (h >>> 15)) >>> 0;
}

/** The bytes of Kafka's String (UTF-8), Integer (4) or Long (8 bytes) serializer, big-endian. */
function serialize(key: unknown, keyType: string): Uint8Array {
  if (keyType === "string") return new TextEncoder().encode(String(key));
  const bytes = new DataView(new ArrayBuffer(keyType === "int" ? 4 : 8));
  if (keyType === "int") bytes.setInt32(0, Number(key));
  else bytes.setBigInt64(0, BigInt(key as string | number));
  return new Uint8Array(bytes.buffer);
}

export function partitionOf(key: unknown, keyType: string, partitions: number): number {
  return (murmur2(serialize(key, keyType)) & 0x7fffffff) % partitions;
}

interface Route {
  argument: string; // "key" or "keys"
  keyType: string;
}

/** GET /cluster, as routing needs it. */
export class ClusterMap {
  constructor(
    readonly version: number,
    readonly partitions: number,
    readonly addresses: Map<string, string>, // node -> base URL
    readonly replicas: string[][], // per partition: its live replicas, the active first
    readonly routes: Map<string, Route>, // root field -> how it names its partitions
  ) {}

  static read(body: any, scheme: string): ClusterMap { // GET /cluster's JSON, as it is
    const partitions = [...body.partitions].sort((a, b) => a.partition - b.partition);
    return new ClusterMap(
      Number(body.assignment_version),
      Number(body.partitions_count),
      new Map(
        body.nodes.map((n: { id: string; address: string }) => [n.id, `${scheme}//${n.address}`]),
      ),
      partitions.map((p: { replicas: { node: string; role: string; alive: boolean }[] }) =>
        [...p.replicas]
          .sort((a, b) => Number(a.role !== "ACTIVE") - Number(b.role !== "ACTIVE"))
          .filter((r) => r.alive)
          .map((r) => r.node),
      ),
      new Map(
        body.routes.map((r: { field: string; argument: string; key_type: string }) => [
          r.field,
          { argument: r.argument, keyType: r.key_type },
        ]),
      ),
    );
  }

  /** The nodes to try for a request reading `keys`, best first. */
  nodesFor(keys: [string, unknown][]): string[] {
    const held = new Map<string, number>();
    for (const [keyType, key] of keys) {
      const replicas = this.replicas[partitionOf(key, keyType, this.partitions)] ?? [];
      // an active replica above a standby
      replicas.forEach((node, rank) => held.set(node, (held.get(node) ?? 0) + (rank ? 1 : 2)));
    }
    return [...held.entries()].sort((a, b) => b[1] - a[1]).map(([node]) => node);
  }
}

type KeyArgument = { field: string; argument: string; value: ValueNode };
const parsed = new Map<string, KeyArgument[] | null>(); // query text -> its key arguments

function keyArguments(query: string, operation: string | undefined): KeyArgument[] | null {
  const cacheKey = `${operation ?? ""}\n${query}`;
  if (!parsed.has(cacheKey)) parsed.set(cacheKey, readKeyArguments(query, operation));
  return parsed.get(cacheKey) ?? null;
}

function readKeyArguments(query: string, operation: string | undefined): KeyArgument[] | null {
  let document: DocumentNode;
  try {
    document = parse(query);
  } catch {
    return null; // the node says what is wrong with it
  }
  const operations = document.definitions.filter((d) => d.kind === Kind.OPERATION_DEFINITION);
  const chosen =
    operation === undefined
      ? operations.length === 1 ? operations[0] : undefined
      : operations.find((o) => o.name?.value === operation);
  if (chosen === undefined) return null;
  const fragments = new Map(
    document.definitions.flatMap((d) =>
      d.kind === Kind.FRAGMENT_DEFINITION ? [[d.name.value, d] as const] : [],
    ),
  );
  const fields: FieldNode[] = [];
  const seen = new Set<string>();
  const walk = (selections: SelectionSetNode): void => {
    for (const s of selections.selections) {
      if (s.kind === Kind.FIELD) fields.push(s);
      else if (s.kind === Kind.INLINE_FRAGMENT) walk(s.selectionSet);
      else if (!seen.has(s.name.value) && fragments.has(s.name.value)) {
        seen.add(s.name.value);
        walk(fragments.get(s.name.value)!.selectionSet);
      }
    }
  };
  walk(chosen.selectionSet);
  return fields.flatMap((f) =>
    (f.arguments ?? [])
      .filter((a) => a.name.value === "key" || a.name.value === "keys")
      .map((a) => ({ field: f.name.value, argument: a.name.value, value: a.value })),
  );
}

/** Whether a value is a key of the type the partitioner can place (anything else is routed
 * nowhere: the node says what is wrong with it). */
function isKey(key: unknown, keyType: string): boolean {
  if (keyType === "string") return typeof key === "string";
  if ((typeof key !== "string" && typeof key !== "number") || !/^-?\d+$/.test(String(key))) {
    return false;
  }
  const bits = keyType === "int" ? 32n : 64n;
  const value = BigInt(key);
  return -(2n ** (bits - 1n)) <= value && value < 2n ** (bits - 1n);
}

/** The keys a GraphQL request's routed fields read, as [key type, key] pairs. */
export function keysAsked(
  body: { query?: unknown; operationName?: unknown; variables?: unknown },
  routes: Map<string, Route>,
): [string, unknown][] {
  if (typeof body.query !== "string") return [];
  const variables = (body.variables ?? {}) as Record<string, unknown>;
  const operation = typeof body.operationName === "string" ? body.operationName : undefined;
  const keys: [string, unknown][] = [];
  for (const argument of keyArguments(body.query, operation) ?? []) {
    const route = routes.get(argument.field);
    if (route === undefined || route.argument !== argument.argument) continue;
    const value = valueFromASTUntyped(argument.value, variables);
    for (const key of Array.isArray(value) ? value : [value]) {
      if (isKey(key, route.keyType)) keys.push([route.keyType, key]);
    }
  }
  return keys;
}

/** A fetch for GraphQL over HTTP that sends each request to the node holding its keys. */
export class Router {
  private map: ClusterMap | undefined;
  private stale = true;
  private reading: Promise<void> | undefined;
  readonly down = new Map<string, number>(); // base URL -> until when it is skipped
  routed = 0; // requests sent where their keys are

  constructor(readonly seeds: string[]) {}

  /** POST `body` to `url`'s path on the best node for it; the Response as fetch gives it. */
  async post(url: string, body: string, init: RequestInit = {}): Promise<Response> {
    if (this.stale) await this.readMap(init.headers);
    const targets = this.targets(url, body);
    for (const [rank, base] of targets.entries()) {
      const target = new URL(url);
      const to = new URL(base);
      target.protocol = to.protocol;
      target.host = to.host;
      try {
        return this.noted(await fetch(target, { ...init, method: "POST", body }));
      } catch (error) {
        if (rank === targets.length - 1) throw error;
        this.down.set(base, Date.now() + DOWN_FOR_MS);
        this.stale = true;
      }
    }
    throw new Error("unreachable: there is always the request's own URL");
  }

  private targets(url: string, body: string): string[] {
    const own = new URL(url).origin;
    const map = this.map;
    if (map === undefined) return [own];
    let keys: [string, unknown][] = [];
    try {
      keys = keysAsked(JSON.parse(body), map.routes);
    } catch {
      keys = [];
    }
    const best = map.nodesFor(keys).flatMap((n) => map.addresses.get(n) ?? []);
    const everyone = [...new Set([...best, own, ...map.addresses.values()])];
    const now = Date.now();
    const up = everyone.filter((b) => (this.down.get(b) ?? 0) <= now);
    if (up.length > 0 && best.includes(up[0]!)) this.routed += 1;
    return [...up, ...everyone.filter((b) => !up.includes(b))];
  }

  private noted(response: Response): Response {
    const version = response.headers.get(ASSIGNMENT_HEADER) ?? "";
    if (this.map !== undefined && /^\d+$/.test(version) && Number(version) > this.map.version) {
      this.stale = true;
    }
    return response;
  }

  private async readMap(headers: RequestInit["headers"]): Promise<void> {
    this.reading ??= this.fetchMap(headers).finally(() => (this.reading = undefined));
    await this.reading;
  }

  private async fetchMap(headers: RequestInit["headers"]): Promise<void> {
    const authorization = new Headers(headers).get("authorization");
    const known = this.map ? [...this.map.addresses.values()] : [];
    for (const base of new Set([...known, ...this.seeds])) {
      try {
        const response = await fetch(`${base}/cluster`, {
          headers: authorization ? { authorization } : {},
        });
        if (response.ok) {
          this.map = ClusterMap.read(await response.json(), new URL(base).protocol);
          this.stale = false;
          return;
        }
      } catch {
        continue;
      }
    }
    this.stale = false; // no map to be had: route nothing until a node says otherwise
  }
}
