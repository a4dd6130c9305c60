// A second subgraph: customers (accounts.graphql), whose totals and latest booking
// stategate resolves.
// usage: node accounts.mjs PORT '["C000001", ...]'
import { ApolloServer } from "@apollo/server";
import { startStandaloneServer } from "@apollo/server/standalone";
import { buildSubgraphSchema } from "@apollo/subgraph";
import { readFileSync } from "node:fs";
import { parse } from "graphql";

const [port, ids] = [Number(process.argv[2]), JSON.parse(process.argv[3])];
const typeDefs = parse(readFileSync(new URL("accounts.graphql", import.meta.url), "utf8"));
const customer = (id) => ({ id, name: `Customer ${id}`, totals: { key: id }, latest: { key: id } });
const resolvers = { Query: { customers: () => ids.map(customer) } };
const server = new ApolloServer({ schema: buildSubgraphSchema([{ typeDefs, resolvers }]) });
const { url } = await startStandaloneServer(server, { listen: { host: "127.0.0.1", port } });
console.log(`accounts ready at ${url}`);
