/* What the console knows right now: the signed-in principal, the rooms as last streamed, and the room cards. */

const state = {
  monitor: null,        // the #monitor= token (it is already in the address bar); never a key
  principal: null,
  rooms: new Map(),     // id -> latest summary
  order: [],
  startedAt: null,
  es: null,
  retry: 0,
  chartRoom: null,
  plot: null,
  splitRates: null,
  hidden: new Set(),
  armed: null,          // visitor eject arming: "room:ticket"
  lastFrameAt: 0,
};
const may = (grant) => !!state.principal && state.principal.grants.includes(grant);
// room id -> its card on the page (built by cards.js; dialogs return focus to one)
const cards = new Map();

export { cards, may, state };
