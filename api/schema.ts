// The request schemas of the routes, written once: each builder returns the plain JSON Schema that
// ajv checks and /openapi.json publishes (its keys in the order written), carrying the TypeScript
// type of its instances, from which a route's `body` and `query` types are read. Plain mapped types
// rather than a type-level JSON Schema reader (json-schema-to-ts made tsc twenty times slower).

/** A JSON Schema whose instances are T (the type rides along for handlers; no such key at runtime). */
export type Schema<T> = Record<string, unknown> & { readonly __type?: T };
/** The type of a schema's instances. */
export type Infer<S> = S extends { readonly __type?: infer T } ? T : never;

type Keywords = Record<string, unknown>;
type Properties = Record<string, Schema<unknown>>;
/** Properties with a `default`: ajv fills them in, so the handler always has them. */
type Defaulted<P extends Properties> = {
  [K in keyof P]: P[K] extends { default: unknown } ? K : never;
}[keyof P];
type Present<P extends Properties, R extends PropertyKey> = keyof P & (R | Defaulted<P>);
type ObjectOf<P extends Properties, R extends PropertyKey> = {
  [K in Present<P, R>]: Infer<P[K]>;
} & { [K in Exclude<keyof P, Present<P, R>>]?: Infer<P[K]> } extends infer O
  ? { [K in keyof O]: O[K] }
  : never;

const typed = <T>(json: Keywords) => json as Schema<T>;
/** `{ type, ...keywords }`, whose keywords' types are kept: an object sees a property's `default`. */
const leaf =
  <T>(type: string) =>
  <K extends Keywords = Keywords>(keywords?: K) =>
    typed<T>({ type, ...keywords }) as Schema<T> & K;

/** The builders of request schemas: `s.object({ required: ['nick'], properties: { nick: s.string() } })`. */
export const s = {
  string: leaf<string>('string'),
  integer: leaf<number>('integer'),
  boolean: leaf<boolean>('boolean'),
  null: () => typed<null>({ type: 'null' }),
  /** One of these values: `{ enum: [...values], ...keywords }`. */
  enum: <const V extends readonly (string | number)[], K extends Keywords = Keywords>(
    values: V,
    keywords?: K,
  ) => typed<V[number]>({ enum: [...values], ...keywords }) as Schema<V[number]> & K,
  const: <const V extends string | number | boolean>(value: V) => typed<V>({ const: value }),
  /** An instance of any of the schemas: `{ anyOf: [...] }`. */
  anyOf: <S extends Schema<unknown>[]>(...schemas: S) => typed<Infer<S[number]>>({ anyOf: schemas }),
  /** The schema's instances or null: its `type` becomes `[type, 'null']`, where it stands. */
  nullable: <T>(schema: Schema<T>) => typed<T | null>({ ...schema, type: [schema.type, 'null'] }),
  /** `{ type: 'array', ...keywords }`, its elements those of `items`. */
  array: <I extends Schema<unknown>>(keywords: { items: I } & Keywords) =>
    typed<Infer<I>[]>({ type: 'array', ...keywords }),
  /** `{ type: 'object', ...keywords }` of named `properties`: those `required` lists, or that have a
   * `default`, are always there; the others may be absent. */
  object: <P extends Properties, const R extends readonly (keyof P & string)[] = []>(
    keywords: { properties: P; required?: R } & Keywords,
  ) => typed<ObjectOf<P, R[number]>>({ type: 'object', ...keywords }),
  /** `{ type: 'object', ...keywords }` whose keys the caller names (propertyNames), each value one of
   * `additionalProperties` (any value without it). */
  map: <V extends Schema<unknown> = Schema<unknown>>(
    keywords: { additionalProperties?: V } & Keywords = {},
  ) => typed<Record<string, Infer<V>>>({ type: 'object', ...keywords }),
};
