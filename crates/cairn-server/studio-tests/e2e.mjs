// End-to-end test of the studio in headless Chromium (playwright-core
// driving Debian's /usr/bin/chromium). Run by tests/studio.rs against a
// live server:
//   CAIRN_URL=http://127.0.0.1:PORT/ CAIRN_TOKEN=… SCREENSHOT_DIR=… node e2e.mjs
// Exits non-zero on the first failed step; writes a screenshot of each page.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const root = process.env.CAIRN_URL;
// A second server over another file, started with --read-only.
const readOnlyRoot = process.env.CAIRN_READ_ONLY_URL;
const token = process.env.CAIRN_TOKEN || "";
const shots = process.env.SCREENSHOT_DIR || "studio-screenshots";
const browserPath = process.env.CAIRN_CHROMIUM || "/usr/bin/chromium";
if (!root || !readOnlyRoot) {
  console.error("CAIRN_URL and CAIRN_READ_ONLY_URL must be set");
  process.exit(2);
}
const api = root.replace(/\/$/, "") + "/api/v1";
mkdirSync(shots, { recursive: true });

// Everything is bounded: one minute and a half for the whole run.
setTimeout(() => {
  console.error("e2e: timed out");
  process.exit(3);
}, 90_000).unref();

// "Another client": plain HTTP calls with the token.
async function call(method, path, body, type = "application/json") {
  const r = await fetch(api + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": type },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.status === 204 ? null : r.json();
}

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
  console.log("ok - " + what);
}

let step = "start";
const problems = [];
const browser = await chromium.launch({
  executablePath: browserPath,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  timeout: 30_000,
});
try {
  const context = await browser.newContext({ viewport: { width: 1100, height: 760 }, colorScheme: "light" });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // 401s before the token is given, the 400 of the bad filter, the 409
    // of a duplicate _id and the 412 of a conflicting save below are
    // expected; anything else (a CSP violation, a script error) fails.
    if (m.type() === "error" && !/status of (40[019]|412) /.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on("dialog", (d) => d.accept());
  const shot = async (name) => {
    const p = join(shots, `${name}.png`);
    await page.screenshot({ path: p, fullPage: false });
    console.log(`screenshot: ${p}`);
  };
  const heading = (text) => page.getByRole("heading", { level: 1, name: text }).waitFor();

  step = "open the studio; the API asks for the token";
  const resp = await page.goto(root);
  const csp = resp.headers()["content-security-policy"] || "";
  check(csp.includes("script-src 'self'") && csp.includes("default-src 'none'"), "the studio is served with a strict CSP");
  check((resp.headers()["content-type"] || "").startsWith("text/html"), "index.html is text/html");
  await page.getByRole("dialog").waitFor();
  await page.getByLabel("Token", { exact: true }).fill("wrong");
  await page.getByRole("button", { name: "Use token" }).click();
  await page.getByText("That token was refused.").waitFor();
  check(true, "a wrong token is refused and asked for again");
  await page.getByLabel("Token", { exact: true }).fill(token);
  await page.getByRole("button", { name: "Use token" }).click();
  await heading("Collections");
  check(await page.evaluate(() => sessionStorage.getItem("cairn-token")) === token, "the token is kept in sessionStorage");

  step = "create a collection from the keyboard";
  // A page takes the focus when it opens, so Tab reaches its first control
  // (the name field) at once; typed in, Enter submits the form.
  const seen = [];
  for (let i = 0; i < 12; i++) {
    await page.keyboard.press("Tab");
    const f = await page.evaluate(() => { const a = document.activeElement; return a?.labels?.[0]?.textContent || (a?.tagName === "BODY" ? "(body)" : a?.textContent); });
    seen.push(f);
    if (f === "Name") break;
  }
  check(seen.length === 1 && seen[0] === "Name", `the first Tab reaches the name field (${seen.join(" → ")})`);
  await page.keyboard.type("people");
  await page.keyboard.press("Enter");
  await heading("Collection people");
  check(true, "collection people created (typed, Enter) and opened");
  const csOff = (await page.locator("#change-stream").textContent()).trim();
  check(csOff === "Change stream: off", `the collection's change stream shows as off (${csOff})`);

  step = "insert a document";
  await page.locator("#new-doc").fill('{"name": "ada", "age": 36}');
  await page.getByRole("button", { name: "Insert" }).click();
  await page.locator("#doc-json").waitFor();
  const url = page.url();
  check(/#\/doc\/people\//.test(url), "the inserted document opens");

  step = "a duplicate _id is refused clearly";
  const firstId = JSON.parse(await page.locator("#doc-json").inputValue())._id;
  await call("PUT", "/collections/people/change_stream", { enabled: true });
  await page.goto(root + "#/c/people");
  await heading("Collection people");
  const csOn = (await page.locator("#change-stream").textContent()).trim();
  check(csOn.startsWith("Change stream: on"), `a change stream turned on shows (${csOn})`);
  await page.locator("#new-doc").fill(JSON.stringify({ _id: firstId, name: "twin" }));
  await page.getByRole("button", { name: "Insert" }).click();
  const dup = page.getByRole("alert").filter({ hasText: "Not inserted: a document with this key already exists" });
  await dup.waitFor();
  const dupText = await dup.textContent();
  check(/409/.test(dupText) && /duplicate_key/.test(dupText), `a 409 on a duplicate _id is shown (${dupText.trim()})`);
  await shot("09-duplicate-id");
  check((await call("POST", "/collections/people/count", {})).count === 1, "the duplicate was not inserted");
  await page.goto(url);
  await page.locator("#doc-json").waitFor();

  step = "edit the document";
  let doc = JSON.parse(await page.locator("#doc-json").inputValue());
  check(doc.name === "ada" && doc.age === 36, "the editor shows the document");
  doc.age = 37;
  await page.locator("#doc-json").fill(JSON.stringify(doc, null, 2));
  await page.getByRole("button", { name: "Save", exact: true }).click();
  await page.locator("#status", { hasText: "Saved." }).waitFor();
  const stored = await call("GET", `/collections/people/documents/${encodeURIComponent(JSON.stringify(doc._id))}`);
  check(stored.age === 37, "the edit is stored");

  step = "bad JSON is refused with its position";
  await page.locator("#doc-json").fill('{"name": "ada", age: 37}');
  await page.locator("#doc-json-msg", { hasText: "Invalid JSON" }).waitFor();
  await page.getByRole("button", { name: "Save", exact: true }).click();
  await page.getByRole("alert").filter({ hasText: "not valid JSON" }).waitFor();
  check(true, "invalid JSON shows an error and is not saved");

  step = "a conflicting edit is reported";
  await page.getByRole("button", { name: "Reload" }).click();
  await page.locator("#doc-json").waitFor();
  await call("PUT", `/collections/people/documents/${encodeURIComponent(JSON.stringify(doc._id))}`, { name: "ada", age: 40 });
  doc = JSON.parse(await page.locator("#doc-json").inputValue());
  doc.note = "mine";
  await page.locator("#doc-json").fill(JSON.stringify(doc, null, 2));
  await page.getByRole("button", { name: "Save", exact: true }).click();
  await page.locator("#conflict", { hasText: "changed by another client" }).waitFor();
  await shot("03-document-conflict");
  check((await call("GET", `/collections/people/documents/${encodeURIComponent(JSON.stringify(doc._id))}`)).age === 40, "the conflicting save wrote nothing");
  await page.getByRole("button", { name: "Discard my edit and reload" }).click();
  await page.locator("#conflict").waitFor({ state: "hidden" });

  step = "page through documents";
  for (let i = 0; i < 25; i++) await call("POST", "/collections/people/documents", { name: `p${i}`, age: 20 + i });
  await page.goto(root + "#/c/people");
  await heading("Collection people");
  await page.getByText("Documents 1–20 of 26").waitFor();
  await shot("02-collection");
  await page.getByRole("button", { name: "Next page" }).click();
  await page.getByText("Documents 21–26 of 26").waitFor();
  check(await page.getByRole("button", { name: "Next page" }).isHidden(), "the cursor pages end");

  step = "create an index";
  await page.getByLabel("Fields and orders (JSON)").fill('{"age": 1}');
  await page.getByRole("button", { name: "Create index" }).click();
  await page.locator("table.indexes", { hasText: '{"age":1}' }).waitFor();
  check(true, "the index is listed");
  await page.getByLabel("Fields and orders (JSON)").fill('{"name": 1}');
  await page.getByLabel("Unique").check();
  await page.getByRole("button", { name: "Create index" }).click();
  await page.getByRole("button", { name: "Drop index name_1" }).click();
  await page.locator("table.indexes", { hasText: "name_1" }).waitFor({ state: "detached" });
  const left = (await call("GET", "/collections/people/indexes")).indexes.map((i) => i.name);
  check(left.join() === "age_1", "a second index is created and dropped");

  step = "integers past 2^53 survive the editor";
  const bigRes = await fetch(api + "/collections/people/documents", {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: '{"name": "big", "n": 9007199254740993}',
  });
  const bigId = (await bigRes.json())._id;
  await page.goto(root + "#/doc/people/" + encodeURIComponent(JSON.stringify(bigId)));
  await page.locator("#doc-json").waitFor();
  const bigText = await page.locator("#doc-json").inputValue();
  check(bigText.includes("9007199254740993"), "the editor shows 9007199254740993 exactly");
  await page.locator("#doc-json").fill(bigText.replace('"big"', '"bigger"'));
  await page.getByRole("button", { name: "Save", exact: true }).click();
  await page.locator("#status", { hasText: "Saved." }).waitFor();
  const bigStored = await (await fetch(api + `/collections/people/documents/${encodeURIComponent(JSON.stringify(bigId))}`, { headers: { Authorization: `Bearer ${token}` } })).text();
  check(bigStored.includes('"n":9007199254740993') && bigStored.includes("bigger"), `the save keeps it exact (${bigStored})`);

  step = "run a query and see the plan";
  await page.goto(root + "#/query/people");
  await heading("Query people");
  await page.getByLabel("Filter (JSON)").fill('{"age": {"$gt": 40}}');
  await page.getByLabel("Sort (JSON)").fill('{"age": -1}');
  await page.getByLabel("Projection (JSON)").fill('{"name": 1, "age": 1}');
  await page.getByRole("button", { name: "Run query" }).click();
  await page.locator("#plan-text").waitFor();
  await page.locator("#q-results .count", { hasText: "4 results" }).waitFor();
  const plan = await page.locator("#plan-text").textContent();
  check(/age/.test(plan), `the plan is shown (${plan.trim()})`);
  await shot("04-query");

  step = "a bad filter is reported";
  await page.getByLabel("Filter (JSON)").fill('{"age": {"$nope": 1}}');
  await page.getByRole("button", { name: "Run query" }).click();
  await page.getByRole("alert").filter({ hasText: "400" }).waitFor();
  check(true, "the server's 400 is shown");

  step = "browse a KV table";
  for (let i = 0; i < 25; i++) await call("PUT", `/kv/settings/keys/k${String(i).padStart(2, "0")}`, `value ${i}`, "application/octet-stream");
  await page.goto(root + "#/kv");
  await heading("KV tables");
  await page.getByRole("link", { name: "settings" }).click();
  await heading("KV table settings");
  await page.getByText("page 1, 20 entries").waitFor();
  await shot("05-kv");
  await page.getByRole("button", { name: "Next page" }).click();
  await page.getByText("page 2, 5 entries").waitFor();
  check((await page.locator("table.kv tbody tr").first().textContent()).startsWith("k20"), "the second page starts at k20");
  await page.getByRole("button", { name: "Previous page" }).click();
  await page.getByText("page 1, 20 entries").waitFor();
  check((await page.locator("table.kv tbody tr").first().textContent()).startsWith("k00"), "Previous page goes back to k00");
  await page.getByLabel("Start at key").fill("k1");
  await page.getByRole("button", { name: "Show" }).click();
  await page.getByText("page 1, 15 entries").waitFor();
  check((await page.locator("table.kv tbody tr").first().textContent()).startsWith("k10"), "a range starts at a given key");

  step = "watch the global log live";
  await call("POST", "/streams/order-1/events?expected=no_stream", [{ type: "Created", data: { total: 12 } }]);
  await page.goto(root + "#/events");
  await heading("Events");
  await page.getByRole("button", { name: "Watch live" }).click();
  await page.locator("#ev-state", { hasText: "caught up" }).waitFor();
  await page.locator("#ev-list li", { hasText: "Created" }).waitFor();
  await call("POST", "/streams/order-1/events?expected=0", [{ type: "Shipped", data: { carrier: "post" } }]);
  await page.locator("#ev-list li", { hasText: "Shipped" }).waitFor();
  check((await page.locator("#ev-list li").count()) === 2, "an event appended by another client appears live, once");
  await shot("06-events");

  step = "stopped and resumed, the live view continues with Last-Event-ID";
  const resumed = [];
  page.on("request", (rq) => {
    const id = rq.headers()["last-event-id"];
    if (rq.url().includes("/events/subscribe") && id !== undefined) resumed.push(id);
  });
  check(await page.getByRole("button", { name: "Resume" }).isDisabled(), "Resume is disabled while watching");
  await page.getByRole("button", { name: "Stop" }).click();
  await page.locator("#ev-state", { hasText: "Stopped after 1" }).waitFor();
  await call("POST", "/streams/order-1/events?expected=1", [{ type: "Delivered" }]);
  await page.getByRole("button", { name: "Resume" }).click();
  await page.locator("#ev-list li", { hasText: "Delivered" }).waitFor();
  await page.locator("#ev-state", { hasText: "caught up" }).waitFor();
  check(resumed.length === 1 && resumed[0] === "1", `it resumed with Last-Event-ID: ${resumed.join(",")}`);
  check((await page.locator("#ev-list li").count()) === 3, "the event appended while stopped appears, and nothing twice");

  step = "stats with a chart";
  await page.goto(root + "#/stats");
  await heading("Stats");
  check((await page.locator("#pages-chart svg rect").count()) === 8, "the pages chart has a bar per kind");
  await page.locator("#fill-chart svg").waitFor();
  await shot("07-stats");
  await page.emulateMedia({ colorScheme: "dark" });
  await shot("08-stats-dark");
  await page.emulateMedia({ colorScheme: "light" });

  step = "the collections list";
  await page.goto(root + "#/collections");
  await heading("Collections");
  await page.getByRole("link", { name: "people" }).waitFor();
  await shot("01-collections");
  await call("POST", "/collections", { name: "scratch" });
  await page.reload();
  await page.getByRole("button", { name: "Drop collection scratch" }).click();
  await page.getByRole("link", { name: "scratch" }).waitFor({ state: "detached" });
  check((await call("GET", "/collections")).collections.join() === "people", "a collection is dropped");

  step = "a read-only server: editing controls disabled, writes refused";
  {
    const ro = await context.newPage();
    ro.setDefaultTimeout(10_000);
    ro.on("pageerror", (e) => problems.push(`read-only page error: ${e.message}`));
    ro.on("console", (m) => {
      if (m.type() === "error") problems.push(`read-only console: ${m.text()}`);
    });
    await ro.goto(readOnlyRoot + "#/c/notes");
    await ro.getByRole("heading", { level: 1, name: "Collection notes" }).waitFor();
    const banner = ro.locator("#read-only-banner");
    await banner.waitFor();
    check(/--read-only/.test(await banner.textContent()), "a banner says the server is read-only");
    check(await ro.getByRole("button", { name: "Insert" }).isDisabled(), "Insert is disabled");
    check(await ro.getByRole("button", { name: "Create index" }).isDisabled(), "Create index is disabled");
    check(!(await ro.locator("#new-doc").isEditable()), "the new-document editor is read-only");
    check((await ro.locator("form[aria-label='Insert a document'] .read-only-note").textContent()).includes("--read-only"), "the insert form says why");
    await ro.goto(readOnlyRoot + "#/doc/notes/1");
    await ro.locator("#doc-json").waitFor();
    check(JSON.parse(await ro.locator("#doc-json").inputValue()).text === "hello", "documents can still be read");
    check(await ro.getByRole("button", { name: "Save", exact: true }).isDisabled(), "Save is disabled");
    check(await ro.getByRole("button", { name: "Delete" }).isDisabled(), "Delete is disabled");
    check(!(await ro.locator("#doc-json").isEditable()), "the document editor is read-only");
    // Submitting anyway (Enter in the form) is refused with the message.
    await ro.locator("form[aria-label='Edit the document']").evaluate((f) => f.requestSubmit());
    await ro.getByRole("alert").filter({ hasText: "nothing can be changed" }).waitFor();
    check(true, "a save submitted anyway is refused with a clear message");
    await ro.goto(readOnlyRoot + "#/collections");
    await ro.getByRole("heading", { level: 1, name: "Collections" }).waitFor();
    check(await ro.getByRole("button", { name: "Drop collection notes" }).isDisabled(), "Drop is disabled");
    await ro.screenshot({ path: join(shots, "10-read-only.png") });
    console.log(`screenshot: ${join(shots, "10-read-only.png")}`);
    // And the server refuses a write that bypasses the studio.
    const w = await fetch(readOnlyRoot.replace(/\/$/, "") + "/api/v1/collections/notes/documents", { method: "POST", body: "{}", headers: { "Content-Type": "application/json" } });
    const wp = await w.json();
    check(w.status === 403 && wp.code === "read_only", `the server refuses a write (${w.status} ${wp.code})`);
    await ro.close();
  }

  step = "no script error and no CSP violation";
  check(problems.length === 0, `no console errors (${problems.join("; ")})`);
  console.log("e2e: all steps passed");
} catch (e) {
  console.error(`e2e FAILED at step "${step}": ${e.message}`);
  if (problems.length) console.error("console: " + problems.join("\n"));
  process.exitCode = 1;
} finally {
  await browser.close();
}
