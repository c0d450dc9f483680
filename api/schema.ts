// The request schemas of the routes, written once: each builder returns the plain JSON Schema that
// ajv checks and /openapi.json publishes (its keys in the order written), carrying the TypeScript
// type of its instances, from which a route's `body` and `query` types are read. Plain mapped types
// rather than a type-level JSON Schema reader (json-schema-to-ts made tsc twenty times slower).

/** A JSON Schema whose instances are T (the type rides along for handlers; no such key at runtime). */
export type Schema<T> = Record<string, unknown> & { readonly __type?: T };
/** An object's schema, with the type of its instances once ajv has filled in the properties that
 * have a `default` (the query's validator does; the body's does not). */
export type ObjectSchema<T, Filled> = Schema<T> & { readonly __filled?: Filled };
/** The type of a schema's instances. */
export type Infer<S> = S extends { readonly __type?: infer T } ? T : never;

type Keywords = Record<string, unknown>;
type Properties = Record<string, Schema<unknown>>;
type Defaulted<P extends Properties> = {
  [K in keyof P]: P[K] extends { default: unknown } ? K : never;
}[keyof P];
/** The instances of an object of properties P, those named by R always there. */
type ObjectOf<P extends Properties, R extends PropertyKey> = {
  [K in keyof P & R]: Infer<P[K]>;
} & { [K in Exclude<keyof P, R>]?: Infer<P[K]> } extends infer O
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
  /** `{ type: 'object', ...keywords }` of named `properties`: those `required` lists are always
   * there (and, in a query, those that have a `default`); the others may be absent. */
  object: <P extends Properties, const R extends readonly (keyof P & string)[] = []>(
    keywords: { properties: P; required?: R } & Keywords,
  ) =>
    ({ type: 'object', ...keywords }) as ObjectSchema<
      ObjectOf<P, R[number]>,
      ObjectOf<P, R[number] | Defaulted<P>>
    >,
  /** `{ type: 'object', ...keywords }` whose keys the caller names (propertyNames), each value one of
   * `additionalProperties` (any value without it). */
  map: <V extends Schema<unknown> = Schema<unknown>>(
    keywords: { additionalProperties?: V } & Keywords = {},
  ) => typed<Record<string, Infer<V>>>({ type: 'object', ...keywords }),
};
