// CairnDB studio: a hash-routed page over the /api/v1 API. No framework,
// no build step; the DOM is built with h() (never innerHTML), so data from
// the database is always text.
"use strict";

const API = "api/v1";
const TOKEN_KEY = "cairn-token";
const PAGE = 20;
// Set at start from /server: a --read-only server refuses every write, so
// the studio disables its editing controls and says why.
let READ_ONLY = false;
const READ_ONLY_TEXT = "Read-only: this server was started with --read-only; nothing can be changed from here.";

// ---- DOM helpers ---------------------------------------------------------

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat(Infinity)) {
    if (k === null || k === undefined || k === false) continue;
    el.append(k instanceof Node ? k : String(k));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) el.append(k instanceof Node ? k : String(k));
  return el;
}

let fieldSeq = 0;
// A labelled control: returns [label, control].
function field(text, control) {
  if (!control.id) control.id = "f" + ++fieldSeq;
  return [h("label", { for: control.id }, text), control];
}

function status(text) {
  document.getElementById("status").textContent = text || "";
}

function errorText(e) {
  if (e && e.problem) {
    const p = e.problem;
    let t = `${p.status || e.status} ${p.title || ""}: ${p.detail || ""}`.trim();
    if (p.code) t += ` [${p.code}]`;
    if (p.line !== undefined) t += ` (line ${p.line}, column ${p.column})`;
    if (p.current_version !== undefined) t += ` (current version ${p.current_version})`;
    return t;
  }
  return String(e && e.message ? e.message : e);
}

// JSON.parse keeping integers past 2^53 exact (as raw JSON, which
// JSON.stringify writes back digit for digit) where the browser can.
function parseExact(text) {
  if (typeof JSON.rawJSON !== "function") return JSON.parse(text);
  return JSON.parse(text, (k, v, ctx) =>
    typeof v === "number" && !Number.isSafeInteger(v) && ctx && /^-?\d+$/.test(ctx.source) ? JSON.rawJSON(ctx.source) : v
  );
}

function pretty(v) {
  return JSON.stringify(v, null, 2);
}

// ---- the API -------------------------------------------------------------

class ApiError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? problem.detail : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

let tokenWaiters = null;
// Shows the token dialog once for every request waiting on it.
function askToken(message) {
  if (!tokenWaiters) {
    tokenWaiters = [];
    const dlg = document.getElementById("token-dialog");
    document.getElementById("token-error").textContent = message || "";
    document.getElementById("token-input").value = "";
    if (!dlg.open) dlg.showModal();
  }
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

function setupTokenDialog() {
  const dlg = document.getElementById("token-dialog");
  document.getElementById("token-form").addEventListener("submit", () => {
    const v = document.getElementById("token-input").value;
    sessionStorage.setItem(TOKEN_KEY, v);
    document.getElementById("forget-token").hidden = false;
    const w = tokenWaiters || [];
    tokenWaiters = null;
    w.forEach((r) => r());
  });
  dlg.addEventListener("cancel", (ev) => ev.preventDefault());
  const forget = document.getElementById("forget-token");
  forget.hidden = !token();
  forget.addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    forget.hidden = true;
    status("Token forgotten.");
  });
}

function headers(extra) {
  const hd = Object.assign({}, extra || {});
  const t = token();
  if (t) hd.Authorization = "Bearer " + t;
  return hd;
}

// fetch with the token; a 401 asks for it and retries.
async function raw(method, path, body, extra) {
  for (;;) {
    const opts = { method, headers: headers(extra) };
    if (body !== undefined) {
      opts.body = typeof body === "string" ? body : JSON.stringify(body);
      if (!opts.headers["Content-Type"]) opts.headers["Content-Type"] = "application/json";
    }
    if (extra && extra.signal) opts.signal = extra.signal;
    delete opts.headers.signal;
    const r = await fetch(`${API}${path}`, opts);
    if (r.status === 401) {
      await askToken(token() ? "That token was refused." : "");
      continue;
    }
    if (!r.ok) {
      let problem = null;
      try {
        problem = await r.json();
      } catch (_) {
        problem = null;
      }
      throw new ApiError(r.status, problem);
    }
    return r;
  }
}

async function api(method, path, body) {
  const r = await raw(method, path, body);
  if (r.status === 204) return null;
  return parseExact(await r.text());
}

const enc = encodeURIComponent;

// ---- routing -------------------------------------------------------------

const view = () => document.getElementById("view");
let leaving = []; // cleanups of the current page (live subscriptions)
let routeSeq = 0; // a page still loading when another opens is dropped

function decode(part) {
  try {
    return decodeURIComponent(part);
  } catch (_) {
    return part;
  }
}

function route() {
  leaving.forEach((f) => f());
  leaving = [];
  const seq = ++routeSeq;
  const parts = (location.hash || "#/collections").slice(2).split("/").map(decode);
  const [top] = parts;
  for (const a of document.querySelectorAll("nav a")) {
    const on = a.getAttribute("href") === "#/" + (top === "doc" || top === "c" ? "collections" : top);
    if (on) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  status("");
  const pages = {
    collections: () => pageCollections(),
    c: () => pageCollection(parts[1]),
    doc: () => pageDocument(parts[1], parts[2]),
    query: () => pageQuery(parts[1]),
    kv: () => (parts[1] ? pageKvTable(parts[1]) : pageKv()),
    events: () => pageEvents(parts[1]),
    stats: () => pageStats(),
  };
  const page = pages[top] || pages.collections;
  const v = view();
  v.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  Promise.resolve(page())
    .then((nodes) => {
      if (seq !== routeSeq) return;
      v.replaceChildren(...[nodes].flat());
      document.title = `${v.querySelector("h1")?.textContent || "Studio"} · CairnDB studio`;
      // The new page takes the focus: Tab goes on from its top.
      v.focus({ preventScroll: true });
    })
    .catch((e) => {
      if (seq === routeSeq) v.replaceChildren(h("h1", {}, "Error"), h("p", { class: "error", role: "alert" }, errorText(e)));
    });
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

// A button running an async action; an error goes to the status line.
function action(label, fn, attrs) {
  const a = Object.assign({ type: "button" }, attrs || {});
  // Dangerous actions (drop, delete, overwrite) all write.
  const writes = a["data-write"] || a.class === "danger";
  if (writes && READ_ONLY) Object.assign(a, { disabled: true, title: READ_ONLY_TEXT, "data-write": true });
  const b = h("button", a, label);
  b.addEventListener("click", async () => {
    if (writes && READ_ONLY) return status(READ_ONLY_TEXT);
    b.disabled = true;
    try {
      await fn();
    } catch (e) {
      status(errorText(e));
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

// A form whose submit runs an async action; errors go to its alert line.
function form(attrs, kids, fn) {
  const err = h("p", { class: "error", role: "alert" });
  const writes = READ_ONLY && attrs["data-write"];
  const f = h("form", attrs, writes ? h("p", { class: "read-only-note" }, READ_ONLY_TEXT) : null, kids, err);
  if (writes) {
    for (const c of f.querySelectorAll("button, input, textarea, select")) {
      if (c.tagName === "TEXTAREA" || (c.tagName === "INPUT" && c.type !== "checkbox")) c.readOnly = true;
      else c.disabled = true;
    }
  }
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    if (writes) {
      err.textContent = READ_ONLY_TEXT;
      return;
    }
    // Buttons are disabled while it runs (those already disabled stay so).
    const btns = [...f.querySelectorAll("button")].filter((b) => !b.disabled);
    btns.forEach((b) => (b.disabled = true));
    try {
      await fn(err);
    } catch (e) {
      err.textContent = errorText(e);
    } finally {
      btns.forEach((b) => (b.disabled = false));
    }
  });
  return f;
}

// Parses JSON text, naming the position of an error.
function parseJson(text, what) {
  try {
    return parseExact(text);
  } catch (e) {
    throw new Error(`${what} is not valid JSON: ${e.message}`);
  }
}

function optJson(text, what) {
  return text.trim() === "" ? undefined : parseJson(text, what);
}

// A textarea that checks its JSON as you type.
function jsonArea(attrs, value) {
  const ta = h("textarea", Object.assign({ spellcheck: "false" }, attrs));
  ta.value = value;
  const msg = h("p", { class: "error", id: (attrs.id || "ta" + ++fieldSeq) + "-msg", "aria-live": "polite" });
  ta.setAttribute("aria-describedby", msg.id);
  const check = () => {
    if (ta.value.trim() === "" && attrs["data-optional"]) {
      msg.textContent = "";
      ta.removeAttribute("aria-invalid");
      return true;
    }
    try {
      JSON.parse(ta.value);
      msg.textContent = "";
      ta.removeAttribute("aria-invalid");
      return true;
    } catch (e) {
      msg.textContent = "Invalid JSON: " + e.message;
      ta.setAttribute("aria-invalid", "true");
      return false;
    }
  };
  ta.addEventListener("input", check);
  ta.check = check;
  return [ta, msg];
}

// ---- collections ---------------------------------------------------------

async function pageCollections() {
  const { collections } = await api("GET", "/collections");
  const name = h("input", { name: "name", required: true, autocomplete: "off" });
  return [
    h("h1", {}, "Collections"),
    collections.length
      ? h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Actions"))),
          h(
            "tbody",
            {},
            collections.map((c) =>
              h(
                "tr",
                {},
                h("td", {}, h("a", { href: `#/c/${enc(c)}` }, c)),
                h(
                  "td",
                  {},
                  h("a", { href: `#/query/${enc(c)}` }, "Query"),
                  " ",
                  action(
                    "Drop",
                    async () => {
                      if (!confirm(`Drop collection ${c} with its documents and indexes?`)) return;
                      await api("DELETE", `/collections/${enc(c)}`);
                      status(`Dropped ${c}.`);
                      route();
                    },
                    { class: "danger", "aria-label": `Drop collection ${c}` }
                  )
                )
              )
            )
          )
        )
      : h("p", { class: "muted" }, "No collections yet."),
    h("h2", {}, "New collection"),
    form({ "aria-label": "New collection", "data-write": true }, [field("Name", name), h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Create collection"))], async () => {
      await api("POST", "/collections", { name: name.value });
      go(`#/c/${enc(name.value)}`);
    }),
  ];
}

function idSegment(id) {
  return enc(JSON.stringify(id));
}

function summary(doc) {
  const { _id, ...rest } = doc;
  const t = JSON.stringify(rest);
  return t.length > 160 ? t.slice(0, 157) + "…" : t;
}

function docTable(coll, docs) {
  return h(
    "table",
    { class: "docs" },
    h("thead", {}, h("tr", {}, h("th", {}, "_id"), h("th", {}, "Fields"))),
    h(
      "tbody",
      {},
      docs.map((d) =>
        h(
          "tr",
          {},
          h("td", { class: "mono" }, d._id === undefined ? "—" : h("a", { href: `#/doc/${enc(coll)}/${idSegment(d._id)}` }, JSON.stringify(d._id))),
          h("td", {}, h("code", {}, summary(d)))
        )
      )
    )
  );
}

async function pageCollection(coll) {
  const [{ indexes }, count, changes] = await Promise.all([
    api("GET", `/collections/${enc(coll)}/indexes`),
    api("POST", `/collections/${enc(coll)}/count`, {}),
    api("GET", `/collections/${enc(coll)}/change_stream`).catch(() => null),
  ]);
  // Documents: pages of a cursor (one snapshot); "First page" starts over.
  const list = h("div", { "aria-live": "polite" });
  const pageInfo = h("span", { class: "muted" });
  let cursor = null;
  let shown = 0;
  const next = action("Next page", () => loadPage(false), { id: "next-page" });
  const first = action("First page", () => loadPage(true));
  async function loadPage(fromStart) {
    if (cursor && fromStart) {
      raw("DELETE", `/cursors/${enc(cursor)}`).catch(() => {});
      cursor = null;
    }
    const r = fromStart || !cursor
      ? await api("POST", `/collections/${enc(coll)}/find`, { batch_size: PAGE })
      : await api("GET", `/cursors/${enc(cursor)}?batch_size=${PAGE}`);
    if (fromStart || !cursor) shown = 0;
    const from = shown + 1;
    shown += r.documents.length;
    cursor = r.cursor;
    list.replaceChildren(r.documents.length ? docTable(coll, r.documents) : h("p", { class: "muted" }, "No documents."));
    pageInfo.textContent = r.documents.length ? `Documents ${from}–${shown} of ${count.count}` : "";
    next.hidden = !cursor;
  }
  leaving.push(() => {
    if (cursor) raw("DELETE", `/cursors/${enc(cursor)}`).catch(() => {});
  });
  await loadPage(true);

  const [newDoc, newMsg] = jsonArea({ id: "new-doc", name: "document" }, '{\n  "name": "ada"\n}');
  const idxFields = h("input", { id: "index-fields", class: "mono", value: '{"name": 1}', autocomplete: "off" });
  const idxName = h("input", { id: "index-name", autocomplete: "off", placeholder: "(derived from the fields)" });
  const idxUnique = h("input", { type: "checkbox", id: "index-unique" });
  const idxSparse = h("input", { type: "checkbox", id: "index-sparse" });
  return [
    h("h1", {}, `Collection ${coll}`),
    h("p", {}, h("a", { href: `#/query/${enc(coll)}` }, "Query this collection"), " · ", h("a", { href: "#/collections" }, "All collections")),
    changes
      ? h("p", { id: "change-stream", class: "muted" }, changes.enabled ? "Change stream: on (its changes stream from /api/v1/collections/" + enc(coll) + "/changes)" : "Change stream: off")
      : null,
    h("h2", {}, "Documents"),
    h("div", { class: "row" }, first, next, pageInfo),
    list,
    h("h2", {}, "Insert a document"),
    form({ "aria-label": "Insert a document", "data-write": true }, [field("Document (JSON)", newDoc), newMsg, h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Insert"))], async (err) => {
      if (!newDoc.check()) throw new Error("Fix the JSON first.");
      let r;
      try {
        r = await api("POST", `/collections/${enc(coll)}/documents`, newDoc.value);
      } catch (e) {
        if (e.status !== 409) throw e;
        // A taken _id (or a value a unique index already holds): say so
        // first, then the server's words.
        throw new Error(`Not inserted: a document with this key already exists in ${coll}. ${errorText(e)}`);
      }
      status(`Inserted _id ${JSON.stringify(r._id)}.`);
      go(`#/doc/${enc(coll)}/${idSegment(r._id)}`);
    }),
    h("h2", {}, "Indexes"),
    indexes.length
      ? h(
          "table",
          { class: "indexes" },
          h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Fields"), h("th", {}, "Unique"), h("th", {}, "Sparse"), h("th", {}, "Actions"))),
          h(
            "tbody",
            {},
            indexes.map((i) =>
              h(
                "tr",
                {},
                h("td", {}, i.name),
                h("td", {}, h("code", {}, JSON.stringify(i.fields)), i.expire_after_seconds != null ? ` (TTL: ${i.expire_after_seconds} s)` : ""),
                h("td", {}, i.unique ? "yes" : "no"),
                h("td", {}, i.sparse ? "yes" : "no"),
                h(
                  "td",
                  {},
                  action(
                    "Drop",
                    async () => {
                      if (!confirm(`Drop index ${i.name}?`)) return;
                      await api("DELETE", `/collections/${enc(coll)}/indexes/${enc(i.name)}`);
                      status(`Dropped index ${i.name}.`);
                      route();
                    },
                    { class: "danger", "aria-label": `Drop index ${i.name}` }
                  )
                )
              )
            )
          )
        )
      : h("p", { class: "muted" }, "No indexes."),
    form(
      { "aria-label": "Create an index", "data-write": true },
      [
        h("div", { class: "grid" }, h("div", {}, field("Fields and orders (JSON)", idxFields)), h("div", {}, field("Name (optional)", idxName))),
        h("div", { class: "row" }, h("label", { class: "inline", for: "index-unique" }, idxUnique, "Unique"), h("label", { class: "inline", for: "index-sparse" }, idxSparse, "Sparse"), h("button", { type: "submit", class: "primary" }, "Create index")),
      ],
      async () => {
        const body = { fields: parseJson(idxFields.value, "Fields"), unique: idxUnique.checked, sparse: idxSparse.checked };
        if (idxName.value.trim()) body.name = idxName.value.trim();
        await api("POST", `/collections/${enc(coll)}/indexes`, body);
        status("Index created.");
        route();
      }
    ),
  ];
}

// ---- one document --------------------------------------------------------

async function pageDocument(coll, idText) {
  const path = `/collections/${enc(coll)}/documents/${enc(idText)}`;
  // The document and its version (ETag): a save sends If-Match, and the
  // server refuses it (412) if another client saved in between.
  const load = async () => {
    const r = await raw("GET", path);
    return { doc: parseExact(await r.text()), etag: r.headers.get("ETag") };
  };
  let { doc: loaded, etag } = await load();
  const [ta, msg] = jsonArea({ id: "doc-json", class: "doc", name: "document" }, pretty(loaded));
  const conflict = h("div", { class: "card", hidden: true, role: "alert", id: "conflict" });
  const save = async (force) => {
    if (!ta.check()) throw new Error("The document is not valid JSON; nothing was saved.");
    const doc = JSON.parse(ta.value);
    if (doc === null || typeof doc !== "object" || Array.isArray(doc)) throw new Error("A document is a JSON object.");
    // What is sent is the text as typed: no number is rounded on the way.
    let r;
    try {
      r = await raw("PUT", path, ta.value, force || !etag ? {} : { "If-Match": etag });
    } catch (e) {
      if (e.status !== 412) throw e;
      // Someone else changed (or deleted) it since it was loaded.
      let current = null;
      try {
        current = await load();
      } catch (e2) {
        if (e2.status !== 404) throw e2;
      }
      conflict.hidden = false;
      conflict.replaceChildren(
        h("p", { class: "error" }, current === null ? "Conflict: this document was deleted by another client since you opened it." : "Conflict: this document was changed by another client since you opened it. Its current version:"),
        current === null ? null : h("pre", { class: "block" }, pretty(current.doc)),
        h("div", { class: "row" }, action("Save mine anyway", () => save(true), { class: "danger" }), action("Discard my edit and reload", async () => route()))
      );
      throw new Error("Conflict: not saved (see above).");
    }
    etag = r.headers.get("ETag") || etag;
    ({ doc: loaded, etag } = await load());
    ta.value = pretty(loaded);
    conflict.hidden = true;
    status("Saved.");
  };
  return [
    h("h1", {}, `Document ${idText}`),
    h("p", {}, h("a", { href: `#/c/${enc(coll)}` }, `Back to ${coll}`)),
    conflict,
    form({ "aria-label": "Edit the document", "data-write": true }, [field("Document (JSON)", ta), msg, h("div", { class: "row" }, h("button", { type: "submit", class: "primary", id: "save-doc" }, "Save"), action("Reload", async () => route()), action("Delete", async () => {
      if (!confirm("Delete this document?")) return;
      await api("DELETE", path);
      status("Deleted.");
      go(`#/c/${enc(coll)}`);
    }, { class: "danger" }))], async () => save(false)),
  ];
}

// ---- queries -------------------------------------------------------------

async function pageQuery(coll) {
  const { collections } = await api("GET", "/collections");
  if (!coll && collections.length) coll = collections[0];
  const sel = h("select", { id: "q-collection" }, collections.map((c) => h("option", { value: c, selected: c === coll }, c)));
  sel.addEventListener("change", () => go(`#/query/${enc(sel.value)}`));
  const [filter, fMsg] = jsonArea({ id: "q-filter", "data-optional": "1" }, "{}");
  const [sort, sMsg] = jsonArea({ id: "q-sort", "data-optional": "1", placeholder: '{"age": -1}' }, "");
  const [proj, pMsg] = jsonArea({ id: "q-projection", "data-optional": "1", placeholder: '{"name": 1}' }, "");
  const limit = h("input", { id: "q-limit", type: "number", min: "0", inputmode: "numeric" });
  const results = h("div", { id: "q-results", "aria-live": "polite" });
  const plan = h("div", { id: "q-plan" });
  let cursor = null;
  let n = 0;
  const more = action("More results", async () => {
    const r = await api("GET", `/cursors/${enc(cursor)}?batch_size=${PAGE}`);
    show(r, true);
  }, { hidden: true });
  function show(r, append) {
    cursor = r.cursor;
    more.hidden = !cursor;
    n = append ? n + r.documents.length : r.documents.length;
    const rows = r.documents.map((d) => h("li", {}, h("pre", {}, pretty(d))));
    if (append) results.querySelector("ol").append(...rows);
    else results.replaceChildren(h("p", { class: "muted count" }), h("ol", { class: "events" }, rows));
    results.querySelector(".count").textContent = `${n} result${n === 1 ? "" : "s"}${cursor ? " so far" : ""}`;
  }
  leaving.push(() => {
    if (cursor) raw("DELETE", `/cursors/${enc(cursor)}`).catch(() => {});
  });
  if (!coll) return [h("h1", {}, "Query"), h("p", { class: "muted" }, "No collections yet.")];
  return [
    h("h1", {}, `Query ${coll}`),
    form(
      { "aria-label": "Query" },
      [
        field("Collection", sel),
        h("div", { class: "grid" }, h("div", {}, field("Filter (JSON)", filter), fMsg), h("div", {}, field("Sort (JSON)", sort), sMsg), h("div", {}, field("Projection (JSON)", proj), pMsg)),
        field("Limit", limit),
        h("div", { class: "row" }, h("button", { type: "submit", class: "primary", id: "q-run" }, "Run query")),
      ],
      async () => {
        const q = { filter: optJson(filter.value, "Filter"), sort: optJson(sort.value, "Sort"), projection: optJson(proj.value, "Projection") };
        if (limit.value !== "") q.limit = Number(limit.value);
        if (cursor) raw("DELETE", `/cursors/${enc(cursor)}`).catch(() => {});
        cursor = null;
        const [r, e] = await Promise.all([api("POST", `/collections/${enc(coll)}/find`, Object.assign({ batch_size: PAGE }, q)), api("POST", `/collections/${enc(coll)}/explain`, q)]);
        show(r, false);
        plan.replaceChildren(
          h("h2", {}, "Plan"),
          h("pre", { class: "block", id: "plan-text" }, e.plan),
          h(
            "p",
            { class: "muted" },
            `examined ${e.examined} (keys ${e.keys_examined}, documents ${e.docs_examined}), returned ${e.returned}${e.sorted_in_memory ? ", sorted in memory" : ""}`
          ),
          e.candidates.length
            ? h(
                "table",
                {},
                h("thead", {}, h("tr", {}, h("th", {}, "Candidate plan"), h("th", { class: "num" }, "Estimate"), h("th", {}, "Sorted"), h("th", {}, "Chosen"))),
                h("tbody", {}, e.candidates.map((c) => h("tr", {}, h("td", {}, h("code", {}, c.plan)), h("td", { class: "num" }, c.estimate), h("td", {}, c.sorted ? "yes" : "no"), h("td", {}, c.chosen ? "chosen" : ""))))
              )
            : null
        );
      }
    ),
    plan,
    h("h2", {}, "Results"),
    results,
    more,
  ];
}

// ---- KV tables -----------------------------------------------------------

function bytesText(o, name) {
  return o[name] !== undefined ? o[name] : `base64:${o[name + "_b64"]}`;
}

async function pageKv() {
  const { tables } = await api("GET", "/kv");
  const table = h("input", { id: "kv-new-table", required: true, autocomplete: "off" });
  const key = h("input", { id: "kv-new-key", required: true, autocomplete: "off" });
  const value = h("input", { id: "kv-new-value", autocomplete: "off" });
  return [
    h("h1", {}, "KV tables"),
    tables.length
      ? h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "Table"), h("th", {}, "Key type"), h("th", {}, "Value type"), h("th", { class: "num" }, "Entries"))),
          h("tbody", {}, tables.map((t) => h("tr", {}, h("td", {}, h("a", { href: `#/kv/${enc(t.name)}` }, t.name)), h("td", {}, t.key_type), h("td", {}, t.value_type), h("td", { class: "num" }, t.len))))
        )
      : h("p", { class: "muted" }, "No key-value tables."),
    h("h2", {}, "Put a key"),
    form({ "aria-label": "Put a key", "data-write": true }, [h("div", { class: "grid" }, h("div", {}, field("Table", table)), h("div", {}, field("Key (UTF-8)", key)), h("div", {}, field("Value (UTF-8)", value))), h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Put"))], async () => {
      await raw("PUT", `/kv/${enc(table.value)}/keys/${enc(key.value)}`, value.value, { "Content-Type": "application/octet-stream" });
      go(`#/kv/${enc(table.value)}`);
    }),
  ];
}

async function pageKvTable(table) {
  const start = h("input", { id: "kv-start", autocomplete: "off" });
  const useB64 = h("input", { type: "checkbox", id: "kv-b64" });
  const list = h("div", { "aria-live": "polite" });
  const pos = h("span", { class: "muted" });
  // A page starts at {key, b64} (null: the first key); the starts of the
  // pages before this one make "Previous page" work on a forward range.
  let here = null;
  let next = null;
  let before = [];
  const prevBtn = action("Previous page", async () => {
    const back = before.pop();
    await show(back === undefined ? null : back).catch((e) => {
      before.push(back);
      throw e;
    });
  }, { id: "kv-prev", hidden: true });
  const nextBtn = action("Next page", async () => {
    before.push(here);
    await show(next).catch((e) => {
      before.pop();
      throw e;
    });
  }, { id: "kv-next" });
  async function show(from) {
    const b64 = from ? from.b64 : useB64.checked;
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (b64) q.set("encoding", "base64");
    if (from && from.key !== "") q.set("start", from.key);
    const r = await api("GET", `/kv/${enc(table)}/range?${q}`);
    useB64.checked = b64;
    here = from;
    // A next key that is not UTF-8 comes as base64: page on in base64.
    next = r.next ? (r.next.key !== undefined ? { key: r.next.key, b64 } : { key: r.next.key_b64, b64: true }) : null;
    nextBtn.hidden = next === null;
    prevBtn.hidden = before.length === 0;
    pos.textContent = `page ${before.length + 1}, ${r.entries.length} entr${r.entries.length === 1 ? "y" : "ies"}`;
    list.replaceChildren(
      r.entries.length
        ? h(
            "table",
            { class: "kv" },
            h("thead", {}, h("tr", {}, h("th", {}, "Key"), h("th", {}, "Value"))),
            h("tbody", {}, r.entries.map((e) => h("tr", {}, h("td", { class: "mono" }, bytesText(e, "key")), h("td", { class: "mono" }, bytesText(e, "value")))))
          )
        : h("p", { class: "muted" }, "No entries.")
    );
  }
  await show(null);
  return [
    h("h1", {}, `KV table ${table}`),
    h("p", {}, h("a", { href: "#/kv" }, "All tables")),
    form({ "aria-label": "Range" }, [field("Start at key", start), h("div", { class: "row" }, h("label", { class: "inline", for: "kv-b64" }, useB64, "Keys as base64"), h("button", { type: "submit", class: "primary" }, "Show"))], async () => {
      before = [];
      await show({ key: start.value, b64: useB64.checked });
    }),
    h("div", { class: "row" }, prevBtn, nextBtn, pos),
    list,
  ];
}

// ---- events --------------------------------------------------------------

// A live SSE subscription read with fetch (EventSource cannot send the
// token); it reconnects — and resumes after `after`, if given — with
// Last-Event-ID naming the last event seen, so nothing is skipped or
// repeated. Returns {stop, last}.
function subscribe(path, from, on, after) {
  const ctl = new AbortController();
  let lastId = after ?? null;
  let stopped = false;
  (async () => {
    while (!stopped) {
      try {
        const extra = { Accept: "text/event-stream", signal: ctl.signal };
        if (lastId !== null) extra["Last-Event-ID"] = lastId;
        const q = lastId === null && from !== "" ? `${path.includes("?") ? "&" : "?"}from=${enc(from)}` : "";
        const r = await raw("GET", path + q, undefined, extra);
        on.state(lastId === null ? "connected" : `resumed after ${lastId}`);
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let ev = "message", data = "", id = null;
            for (const line of block.split("\n")) {
              if (line.startsWith(":")) continue;
              const c = line.indexOf(":");
              const k = c < 0 ? line : line.slice(0, c);
              const v = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
              if (k === "event") ev = v;
              else if (k === "data") data += (data ? "\n" : "") + v;
              else if (k === "id") id = v;
            }
            if (id !== null) lastId = id;
            if (data) on.message(ev, parseExact(data));
          }
        }
      } catch (e) {
        if (stopped) return;
        on.state("disconnected: " + errorText(e));
      }
      if (stopped) return;
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  return {
    stop: () => {
      stopped = true;
      ctl.abort();
    },
    last: () => lastId,
  };
}

async function pageEvents(stream) {
  const { streams } = await api("GET", "/streams");
  const which = h("select", { id: "ev-source" }, h("option", { value: "" }, "The global log (every stream)"), streams.map((x) => h("option", { value: x.name, selected: x.name === stream }, `Stream ${x.name} (version ${x.version ?? "—"})`)));
  const from = h("input", { id: "ev-from", type: "number", min: "0", value: "0", inputmode: "numeric" });
  const list = h("ol", { class: "events", id: "ev-list", "aria-live": "polite" });
  const state = h("p", { class: "muted", id: "ev-state" }, "Not watching.");
  // The subscription, and where a stopped one may resume.
  let sub = null;
  let resume = null;
  const startBtn = h("button", { type: "submit", class: "primary", id: "ev-watch" }, "Watch live");
  const stopBtn = h("button", { type: "button", id: "ev-stop", disabled: true }, "Stop");
  const resumeBtn = h("button", { type: "button", id: "ev-resume", disabled: true }, "Resume");
  const halt = () => {
    if (!sub) return;
    sub.stop();
    const last = sub.last();
    resume = last === null ? null : { path: sub.path, last };
    sub = null;
    stopBtn.disabled = true;
    resumeBtn.disabled = resume === null;
    state.textContent = resume ? `Stopped after ${resume.last}; Resume continues from there.` : "Stopped.";
  };
  leaving.push(() => sub && sub.stop());
  const on = {
    state: (t) => (state.textContent = t),
    message: (ev, d) => {
      if (ev === "event") {
        list.append(h("li", {}, h("strong", {}, d.type), " ", h("span", { class: "muted" }, `${d.stream} v${d.version} @${d.position} ${d.recorded_at}`), d.data !== undefined ? h("pre", {}, JSON.stringify(d.data)) : null));
        list.scrollTop = list.scrollHeight;
      } else if (ev === "caught_up") state.textContent = "Live: caught up with the history; new events appear as they are appended.";
      else if (ev === "error") state.textContent = `Error: ${d.detail || JSON.stringify(d)}`;
    },
  };
  const watch = (path, fromValue, after) => {
    sub = subscribe(path, fromValue, on, after);
    sub.path = path;
    stopBtn.disabled = false;
    resumeBtn.disabled = true;
    state.textContent = "Connecting…";
  };
  stopBtn.addEventListener("click", halt);
  resumeBtn.addEventListener("click", () => {
    if (resume) watch(resume.path, "", resume.last);
  });
  const appStream = h("input", { id: "ev-app-stream", required: true, autocomplete: "off", value: stream || "" });
  const appType = h("input", { id: "ev-app-type", required: true, autocomplete: "off" });
  const [appData, appMsg] = jsonArea({ id: "ev-app-data", "data-optional": "1" }, "{}");
  return [
    h("h1", {}, "Events"),
    form(
      { "aria-label": "Watch events" },
      [h("div", { class: "grid" }, h("div", {}, field("Source", which)), h("div", {}, field("From (position, or version for a stream)", from))), h("div", { class: "row" }, startBtn)],
      async () => {
        halt();
        list.replaceChildren();
        watch(which.value ? `/streams/${enc(which.value)}/subscribe` : "/events/subscribe", from.value, null);
      }
    ),
    h("div", { class: "row" }, stopBtn, resumeBtn),
    state,
    list,
    h("h2", {}, "Append an event"),
    form(
      { "aria-label": "Append an event", "data-write": true },
      [h("div", { class: "grid" }, h("div", {}, field("Stream", appStream)), h("div", {}, field("Type", appType))), field("Data (JSON)", appData), appMsg, h("div", { class: "row" }, h("button", { type: "submit" }, "Append"))],
      async () => {
        const ev = { type: appType.value };
        const d = optJson(appData.value, "Data");
        if (d !== undefined) ev.data = d;
        const r = await api("POST", `/streams/${enc(appStream.value)}/events`, [ev]);
        status(`Appended: ${appStream.value} is at version ${r.version}.`);
      }
    ),
  ];
}

// ---- stats ---------------------------------------------------------------

function barChart(items, title) {
  const w = 640, rowH = 26, left = 90, right = 90;
  const max = Math.max(1, ...items.map((i) => i.value));
  const hgt = items.length * rowH + 10;
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${w} ${hgt}`, width: "100%", role: "img", "aria-labelledby": "chart-title" });
  svg.append(s("title", { id: "chart-title" }, title));
  items.forEach((it, i) => {
    const y = 5 + i * rowH;
    const bw = ((w - left - right) * it.value) / max;
    svg.append(
      s("text", { x: left - 8, y: y + 16, "text-anchor": "end" }, it.label),
      s("rect", { x: left, y: y + 3, width: Math.max(bw, it.value ? 1 : 0), height: rowH - 8, rx: 3, fill: `var(--c${(i % 8) + 1})` }),
      s("text", { x: left + bw + 6, y: y + 16 }, String(it.value))
    );
  });
  svg.append(s("line", { class: "axis", x1: left, y1: 0, x2: left, y2: hgt }));
  return svg;
}

function fillGauge(fill) {
  const pct = Math.max(0, Math.min(1, fill || 0));
  const svg = s("svg", { class: "chart", viewBox: "0 0 640 40", width: "100%", role: "img", "aria-labelledby": "fill-title" });
  svg.append(
    s("title", { id: "fill-title" }, `Fill factor of leaf and branch pages: ${(pct * 100).toFixed(1)}%`),
    s("rect", { x: 90, y: 8, width: 460, height: 22, rx: 4, fill: "var(--panel)", stroke: "var(--line)" }),
    s("rect", { x: 90, y: 8, width: 460 * pct, height: 22, rx: 4, fill: "var(--c4)" }),
    s("text", { x: 82, y: 24, "text-anchor": "end" }, "fill"),
    s("text", { x: 558, y: 24 }, `${(pct * 100).toFixed(1)}%`)
  );
  return svg;
}

async function pageStats() {
  const st = await api("GET", "/stats");
  const kinds = ["header", "leaf", "branch", "overflow", "freelist", "free", "pending", "log"];
  const items = kinds.map((k) => ({ label: k, value: st.pages[k] || 0 }));
  return [
    h("h1", {}, "Stats"),
    h("p", {}, `Transaction ${st.txn} · ${st.pages.total} pages of ${st.page_size} bytes · ${st.file_bytes} bytes on disk · B-tree depth ${st.max_depth}`),
    h("h2", {}, "Pages by kind"),
    h("figure", { id: "pages-chart" }, barChart(items, "Pages by kind"), h("figcaption", { class: "muted" }, "Pages by kind in the latest commit.")),
    h("h2", {}, "Fill"),
    h("figure", { id: "fill-chart" }, fillGauge(st.fill_factor)),
    h("h2", {}, "Tables"),
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, h("th", {}, "Table"), h("th", { class: "num" }, "Entries"), h("th", { class: "num" }, "Pages"), h("th", { class: "num" }, "Leaf"), h("th", { class: "num" }, "Branch"), h("th", { class: "num" }, "Overflow"), h("th", { class: "num" }, "Depth"))),
      h("tbody", {}, [Object.assign({ name: "(catalog)" }, st.catalog), ...st.tables].map((t) => h("tr", {}, h("td", { class: "mono" }, t.name), ...["entries", "pages", "leaf_pages", "branch_pages", "overflow_pages", "depth"].map((k) => h("td", { class: "num" }, t[k])))))
    ),
    h("div", { class: "row" }, action("Refresh", async () => route())),
  ];
}

// ---- start ---------------------------------------------------------------

async function start() {
  setupTokenDialog();
  try {
    READ_ONLY = !!(await api("GET", "/server")).read_only;
  } catch (e) {
    status(errorText(e));
  }
  if (READ_ONLY) {
    const b = document.getElementById("read-only-banner");
    b.textContent = READ_ONLY_TEXT;
    b.hidden = false;
  }
  window.addEventListener("hashchange", route);
  route();
}

start();
