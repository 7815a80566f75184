// ESM entry: the same connector as index.js (CommonJS).
import connector from './index.js';

export const { createGate, middleware, skipsGate, isNavigation, wantsJson, VERSION } = connector;
export default connector;
