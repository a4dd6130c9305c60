// GraphQL Code Generator's configuration (README: Typed clients): the demo's schema and the
// named operations of ../operations.graphql become TypeScript types, one typed document per
// operation, in generated/ (not committed: `npm run codegen` writes it).
import type { CodegenConfig } from "@graphql-codegen/cli";

const config: CodegenConfig = {
  schema: "../../schema.graphql",
  documents: ["../operations.graphql"],
  emitLegacyCommonJSImports: false, // "./graphql.js": ECMAScript modules, as Node runs them
  generates: {
    "generated/": {
      preset: "client",
      // Each document a string with its result and variables types attached, sent as it is.
      presetConfig: { fragmentMasking: false },
      config: {
        documentMode: "string",
        enumsAsTypes: true,
        useTypeImports: true,
        strictScalars: true, // a scalar without a mapping below fails the generation
        scalars: {
          // A Long is a decimal string on the wire, exact past 2^53: BigInt(value) for math.
          Long: "string",
          // A DateTime is an RFC 3339 string: Date.parse(value) or new Date(value).
          DateTime: "string",
        },
      },
    },
  },
};

export default config;
