// A typed client in a few lines: three operations of ../operations.graphql sent with fetch,
// their variables and results typed by the documents GraphQL Code Generator wrote into
// generated/ (`npm run codegen`), each routed to the node that holds its keys (routing.ts).
// Against `make demo`:
//
//   npm ci && npm run codegen && npm run build
//   node dist/example.js http://127.0.0.1:8101/graphql C000001
//
// A Long (counts, offsets, lag) arrives as a decimal string, so it is typed `string` and
// stays exact past 2^53; BigInt does the arithmetic. A DateTime is an RFC 3339 string.
import {
  ClusterStateDocument,
  CustomerTotalsBatchDocument,
  HourlyRevenueDocument,
  type TypedDocumentString,
} from "./generated/graphql.js";
import { Router } from "./routing.js";

const [
  url = "http://127.0.0.1:8101/graphql",
  key = "C000001",
  from = "2026-10-25T00:00:00Z",
  to = "2026-10-31T23:00:00Z",
] = process.argv.slice(2);

const router = new Router([new URL(url).origin]);
const answeredBy: Record<string, string | null> = {}; // operation -> the node that answered

interface GraphQLResponse<TResult> {
  data?: TResult | null;
  errors?: { message: string; extensions?: { code?: string } }[];
}

/** One operation over GraphQL over HTTP; its variables and result typed by its document. */
async function execute<TResult, TVariables>(
  document: TypedDocumentString<TResult, TVariables>,
  ...[variables]: TVariables extends Record<string, never> ? [] : [TVariables]
): Promise<TResult> {
  const request = { query: document.toString(), variables: variables ?? {} };
  const response = await router.post(url, JSON.stringify(request), {
    headers: {
      "content-type": "application/json",
      accept: "application/graphql-response+json",
    },
  });
  const operation = /(?:query|subscription)\s+(\w+)/.exec(request.query)?.[1] ?? "?";
  answeredBy[operation] = response.headers.get("stategate-node");
  const body = (await response.json()) as GraphQLResponse<TResult>;
  if (body.errors?.length) {
    const errors = body.errors.map((e) => `${e.extensions?.code ?? "ERROR"}: ${e.message}`);
    throw new Error(errors.join("; "));
  }
  if (body.data == null) throw new Error(`no data (HTTP ${response.status})`);
  return body.data;
}

const sum = (values: (string | null)[]): bigint =>
  values.reduce((total: bigint, value) => total + BigInt(value ?? 0), 0n);

// 1. The partition map: each replica's position and lag (Longs).
const { cluster } = await execute(ClusterStateDocument);
const replicas = (cluster?.partitions ?? []).flatMap((p) => p.replicas);
const lag = sum(replicas.map((r) => r.lag));

// 2. Many keys at once: the entries align with the keys asked.
const keys = [key, `${key}-nobody`];
const batch = await execute(CustomerTotalsBatchDocument, { keys });
const bookings: Record<string, string | null> = {};
for (const entry of batch.customerTotalsBatch?.entries ?? []) {
  bookings[entry.key] = entry.record?.bookings ?? null;
}

// 3. One key's revenue per hour, the windows starting in [from, to].
const hourly = await execute(HourlyRevenueDocument, { key, from, to });
const windows = hourly.hourlyRevenue?.windows ?? [];
const busiest = windows.reduce<(typeof windows)[number] | undefined>(
  (best, w) => (best && BigInt(best.bookings ?? 0) >= BigInt(w.bookings ?? 0) ? best : w),
  undefined,
);

console.log(
  JSON.stringify({
    node: cluster?.node ?? null,
    partitions: cluster?.partitionsCount ?? 0,
    totalLag: lag.toString(),
    bookings,
    windows: windows.length,
    windowBookings: sum(windows.map((w) => w.bookings)).toString(),
    busiestHour: busiest ? { start: busiest.windowStart, bookings: busiest.bookings } : null,
    answeredBy,
    routed: router.routed,
  }),
);
