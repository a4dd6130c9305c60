// Apollo's gateway composing subgraphs by introspection (each one's _service { sdl }).
// usage: node gateway.mjs PORT name=url [name=url ...]
import { ApolloGateway, IntrospectAndCompose } from "@apollo/gateway";
import { ApolloServer } from "@apollo/server";
import { startStandaloneServer } from "@apollo/server/standalone";

const port = Number(process.argv[2]);
const subgraphs = process.argv.slice(3).map((arg) => {
  const [name, url] = arg.split("=", 2);
  return { name, url };
});
const gateway = new ApolloGateway({ supergraphSdl: new IntrospectAndCompose({ subgraphs }) });
const server = new ApolloServer({ gateway });
const { url } = await startStandaloneServer(server, { listen: { host: "127.0.0.1", port } });
console.log(`gateway ready at ${url}`);
