// The pre-deploy check (npm run deploy runs it first). It reads wrangler.toml; a Worker's secrets cannot
// be read back, so for QM_KEY it can only ask the project's own wrangler, when installed and logged in,
// whether the name is in `wrangler secret list`; otherwise it says it did not verify it.
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";

const toml = readFileSync(new URL("../wrangler.toml", import.meta.url), "utf8");
const problems = [];
const vars = {};
let section = "";
for (const raw of toml.split("\n")) {
  const line = raw.trim();
  if (!line || line.startsWith("#")) continue;
  if (line.startsWith("[")) { section = line; continue; }
  const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"/.exec(line);
  if (m && section === "[vars]") vars[m[1]] = m[2];
  if (m && section === "" && m[1] === "main") vars.__main = m[2];
}

const url = vars.QM_URL || "";
let parsed = null;
try { parsed = new URL(url); } catch (e) { /* reported below */ }
if (!url || url.includes("QUEUE-HOST")) problems.push("QM_URL is not set ([vars] in wrangler.toml)");
else if (!parsed) problems.push(`QM_URL is not a URL: ${url}`);
else if (parsed.protocol !== "https:" && !["localhost", "127.0.0.1", "[::1]"].includes(parsed.hostname)) {
  problems.push(`QM_URL must be https (http only for localhost): ${url}`);
}
if (!vars.QM_ROOM || vars.QM_ROOM.includes("YOUR-ROOM")) problems.push("QM_ROOM is not set ([vars] in wrangler.toml)");
if (/^\s*QM_KEY\s*=/m.test(toml)) problems.push("QM_KEY is in wrangler.toml: remove it and use `npx wrangler secret put QM_KEY`");
if (vars.__main !== "src/worker.js") problems.push('main must be "src/worker.js"');

let secretNote = "QM_KEY: not verified (secrets cannot be read back); set it with `npx wrangler secret put QM_KEY`";
const wrangler = fileURLToPath(new URL("../node_modules/.bin/wrangler", import.meta.url));
if (existsSync(wrangler)) {
  try {
    // names only: lists the secrets a deployed Worker has, never their values
    const out = execFileSync(wrangler, ["secret", "list"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], timeout: 30000 });
    if (/\bQM_KEY\b/.test(out)) secretNote = "QM_KEY: present (wrangler secret list)";
    else problems.push("the QM_KEY secret is not set: npx wrangler secret put QM_KEY");
  } catch (e) {
    // not logged in, or the Worker is not deployed yet: the note above stands
  }
}

console.log(`checked wrangler.toml: QM_URL=${url || "(unset)"} QM_ROOM=${vars.QM_ROOM || "(unset)"}`);
console.log(secretNote);
if (problems.length) {
  for (const p of problems) console.error(`  - ${p}`);
  console.error("not deploying: fix the above first");
  process.exit(1);
}
console.log("ok: after deploying, verify with  curl -sI https://YOUR-SITE/ -H 'Accept: text/html' | grep -i -e '^location' -e x-qm-failover");
