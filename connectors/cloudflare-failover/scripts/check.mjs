// The pre-deploy check (npm run deploy runs it first): the script is the built one, and the timeout sane.
import { readFileSync } from "node:fs";

const toml = readFileSync(new URL("../wrangler.toml", import.meta.url), "utf8");
const worker = readFileSync(new URL("../src/worker.js", import.meta.url), "utf8");
const problems = [];
if (!/^\s*main\s*=\s*"src\/worker\.js"/m.test(toml)) problems.push('main must be "src/worker.js"');
const inlined = !worker.includes('"__QM_OFFLINE' + '_HTML__"') && worker.includes("<html");
if (!inlined) {
  problems.push("src/worker.js has no offline page inlined: download the built project from YOUR-QUEUE/connectors/cloudflare-failover/latest.tgz");
}
const timeout = /^\s*QM_TIMEOUT_MS\s*=\s*"?(\d+)"?/m.exec(toml);
if (timeout && Number(timeout[1]) < 1000) problems.push(`QM_TIMEOUT_MS=${timeout[1]} is below one second`);
console.log(`checked wrangler.toml and src/worker.js: offline page ${inlined ? "inlined" : "MISSING"}, QM_TIMEOUT_MS=${timeout ? timeout[1] : "35000 (default)"}`);
if (!/^\s*routes?\s*=/m.test(toml)) console.log("note: no route in wrangler.toml; pass --route or add one in the dashboard");
if (problems.length) {
  for (const p of problems) console.error(`  - ${p}`);
  console.error("not deploying: fix the above first");
  process.exit(1);
}
console.log("ok: after deploying, stop the queue and run  curl -sI https://YOUR-QUEUE-HOSTNAME/ -H 'Accept: text/html' | grep -i x-qm-failover");
