/**
 * Internal: where the SDK's calls to the host go. UDFs never import this module.
 *
 * The SDK (`index.js`) calls the host through the five live bindings below, which hold
 * the contract's imported interfaces (`weir:udf/state@0.1.2` and so on, with camelCase
 * functions: `state.valueGet(id)`, `timers.register(domain, at)`, ...). Which host
 * they point at is decided here, once, when the module loads:
 *
 * - In a component built by componentize-qjs, `./component.js` imports the real
 *   interfaces and they become the host for good.
 * - Anywhere else (Node.js running unit tests), those `weir:udf/...` specifiers do not
 *   resolve: the import fails and the host is a stand-in whose every function throws an
 *   error that says so. `testing.js`'s `TestHost` then installs its in-memory host around
 *   each call it makes into the UDF, with {@link setHost}.
 *
 * The import is dynamic (and awaited at the top level) so that no static import of a
 * `weir:udf/...` specifier is ever linked outside a component; componentize-qjs evaluates
 * it while it snapshots the module at build time, so it costs nothing at run time, and
 * the bindings are as fast as a static import.
 *
 * @module weir/host
 */

/** The state interface (`declare`, `declareWithTtl`, `valueGet`, `valueSet`, `listGet`, ...). */
export let state = null;
/** The timers interface (`register`, `delete`, `currentWatermark`, `currentProcessingTime`). */
export let timers = null;
/** The output interface (`declare`, `emit`). */
export let output = null;
/** The logging interface (`log`). */
export let logging = null;
/** The dead-letters interface (`reject`). */
export let deadLetters = null;

/**
 * Points the SDK at `host`: `{state, timers, output, logging, deadLetters}`, objects with
 * the functions of the contract's interfaces as componentize-qjs presents them.
 * @param {{state: object, timers: object, output: object, logging: object, deadLetters: object}} host
 */
export function setHost(host) {
  state = host.state;
  timers = host.timers;
  output = host.output;
  logging = host.logging;
  deadLetters = host.deadLetters;
}

/** The current host, as one object (to restore it after {@link setHost}). */
export function currentHost() {
  return { state, timers, output, logging, deadLetters };
}

/** Filled in by `index.js` for `testing.js`: the pieces of the SDK a test host drives. */
export const internals = {};

/** The property of a `weir.processFunction(...)` export that holds its definition. */
export const DEFINITION = Symbol("weir.processFunction definition");

/** A host whose every function throws `why`. */
function absentHost(why) {
  const fail = () => {
    throw new Error(why);
  };
  const iface = (names) => Object.freeze(Object.fromEntries(names.map((name) => [name, fail])));
  return Object.freeze({
    state: iface([
      "declare",
      "declareWithTtl",
      "valueGet",
      "valueSet",
      "listGet",
      "listAppend",
      "listSet",
      "mapGet",
      "mapPut",
      "mapRemove",
      "mapEntries",
      "clear",
      "clearAll",
    ]),
    timers: iface(["register", "delete", "currentWatermark", "currentProcessingTime"]),
    output: iface(["declare", "emit"]),
    logging: iface(["log"]),
    deadLetters: iface(["reject"]),
  });
}

/** The component's imports, or `null` outside a component. */
export let componentHost = null;

/** The host to fall back on outside a component (and between a TestHost's calls). */
export let noHost = null;

try {
  componentHost = (await import("./component.js")).default;
  setHost(componentHost);
} catch (e) {
  const reason = e && e.message !== undefined ? e.message : String(e);
  noHost = absentHost(
    "weir: there is no Weir host here: the host's interfaces (weir:udf/...) exist only in a component built " +
      "with componentize-qjs, and keyed state, timers, outputs and logging can only be used while it calls the UDF. " +
      `To run a UDF under Node.js, use TestHost from weir/testing.js. (Importing them failed: ${reason})`,
  );
  setHost(noHost);
}
