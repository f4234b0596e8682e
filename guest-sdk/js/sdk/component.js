/**
 * Internal: the host of a component, i.e. the contract's imports (`wit/weir.wit`, world
 * `keyed-process`) as componentize-qjs provides them, one ES module per WIT interface.
 *
 * Only `host.js` imports this module, dynamically: these specifiers resolve only inside
 * a component, so under Node.js (unit tests) the import fails and `testing.js` supplies
 * the host instead.
 *
 * @module weir/component
 */

import state from "weir:udf/state@0.1.2";
import timers from "weir:udf/timers@0.1.2";
import output from "weir:udf/output@0.1.2";
import logging from "weir:udf/logging@0.1.2";
import deadLetters from "weir:udf/dead-letters@0.1.2";

export default Object.freeze({ state, timers, output, logging, deadLetters });
