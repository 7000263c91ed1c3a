/**
 * Connect's call options name the DOM type `HeadersInit`, which @types/node does not declare
 * globally (it declares `Headers` and `RequestInit`, from undici). Declaring it from `RequestInit`
 * lets the package type-check for Node alone (`lib: ES2022`, no DOM), for its consumers too.
 */
declare global {
  type HeadersInit = NonNullable<RequestInit["headers"]>;
}

export {};
