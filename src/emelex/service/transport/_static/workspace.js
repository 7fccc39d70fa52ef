// The open session's workspace: its Git changes and its files (issue 14's operations).
//
// Same rules as app.js: nothing from the Host becomes markup. Paths arrive as exact bytes
// (bytesBase64) and are shown as text nodes; a preview shows text with textContent and an
// image only from a Blob of bytes whose size and SHA-256 were checked first.

const AREAS = [
  ["staged", "Staged"],
  ["worktree", "Not staged"],
  ["untracked", "Untracked"],
];
const LETTERS = { added: "A", deleted: "D", modified: "M", typeChanged: "T" };
/** Image types the Host may answer and a browser shows safely from a Blob. */
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
/** The Host's own bound on one read (MAX_READ_FILE_BYTES); larger claims are refused. */
const MAX_PREVIEW_BYTES = 64 * 1024 * 1024;
const SLASH = 0x2f;

// ---------------------------------------------------------------- bytes and names

function fromBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function toBase64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

// ignoreBOM: a leading U+FEFF is part of a name (and of a text), never dropped.
const lenient = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const hex2 = (byte) => "\\x" + byte.toString(16).padStart(2, "0");
/** Characters a name must not show raw: controls (C0, DEL, C1) and bidirectional
 * overrides, which could make one name look like another. */
const SUSPECT = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
/** A backslash is escaped too once a name needs escapes (or holds a "\x" of its own),
 * so a literal "\xe9" in a name never looks like the byte 0xE9. */
const SUSPECT_ESCAPED = /[\\\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

/** A path's bytes for display: UTF-8 as text; bytes that are not UTF-8, and suspect
 * characters, as \xNN escapes of their bytes, so names that differ look different. */
export function displayName(bytes) {
  const text = lenient.decode(bytes);
  const exact = !text.includes("\ufffd") || strictOk(bytes);
  if (exact && !SUSPECT.test(text) && !text.includes("\\x")) return text;
  let shown = "";
  for (let i = 0; i < bytes.length; ) {
    const width = sequenceWidth(bytes, i);
    const char = width ? strict.decode(bytes.subarray(i, i + width)) : "";
    const escaped = width === 0 || SUSPECT_ESCAPED.test(char);
    for (let j = 0; escaped && j < Math.max(width, 1); j++) shown += hex2(bytes[i + j]);
    if (!escaped) shown += char;
    i += Math.max(width, 1);
  }
  return shown;
}

function strictOk(bytes) {
  try {
    strict.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/** The width of the valid UTF-8 sequence at ``i`` (0: not one). */
function sequenceWidth(bytes, i) {
  for (let width = 1; width <= 4 && i + width <= bytes.length; width++) {
    try {
      strict.decode(bytes.subarray(i, i + width));
      return width;
    } catch {
      // a longer sequence may be valid
    }
  }
  return 0;
}

const shownPath = (b64) => displayName(fromBase64(b64));

async function sha256(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return "sha256:" + Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

// ---------------------------------------------------------------- the two panels

export class Workspace {
  /** ``api``: app.js's call, subscribe, el and report (one implementation of the protocol). */
  constructor(api) {
    this.api = api;
    this.sessionId = null;
    this.generation = 0; // a new session, or none
    this.listing = 0; // a new directory listed
    this.reading = 0; // a new preview asked for
    this.diffing = 0; // a new diff asked for
    this.directory = null; // bytesBase64 of the listed directory; null: the root
    this.nextAfter = null;
    this.pagesShown = 0; // pages of the directory on screen
    this.loads = Promise.resolve(); // this listing's loads, one after another
    this.filesWatch = null;
    this.read = null;
    this.imageUrl = null;
    this.reloadTimer = null;
    this.changesTimer = null;
    const $ = (id) => document.getElementById(id);
    this.nodes = {
      panels: $("workspace-panels"),
      head: $("changes-head"),
      changes: $("changes"),
      changesNote: $("changes-note"),
      diffTitle: $("diff-title"),
      diff: $("diff"),
      diffNote: $("diff-note"),
      crumbs: $("files-crumbs"),
      files: $("files"),
      filesNote: $("files-note"),
      filesMore: $("files-more"),
      previewTitle: $("preview-title"),
      previewNote: $("preview-note"),
      previewText: $("preview-text"),
      previewImage: $("preview-image"),
    };
    $("changes-refresh").addEventListener("click", () => this.loadChanges(this.generation));
    $("files-refresh").addEventListener("click", () => this.enter(this.directory));
    this.nodes.filesMore.addEventListener("click", () => this.loadFiles(this.listing, false));
  }

  open(sessionId) {
    this.close();
    this.sessionId = sessionId;
    this.nodes.panels.hidden = false;
    this.loadChanges(this.generation);
    this.enter(null);
  }

  close() {
    this.generation += 1;
    this.diffing += 1;
    this.listing += 1;
    this.reading += 1;
    this.sessionId = null;
    clearTimeout(this.changesTimer);
    this.changesTimer = null;
    this.stopWatch();
    this.stopRead();
    this.clearPreview();
    this.clearDiff();
    // Nothing of the previous session stays on screen while the next one loads.
    this.nodes.changes.replaceChildren();
    this.nodes.head.textContent = "";
    this.note(this.nodes.changesNote, "");
    this.nodes.files.replaceChildren();
    this.nodes.filesMore.hidden = true;
  }

  note(node, text) {
    node.textContent = text;
    node.hidden = !text;
  }

  // ------------------------------------------------------------ Changes (gitStatus, gitDiff)

  async loadChanges(generation) {
    const { call, el } = this.api;
    if (!this.sessionId) return;
    let status;
    try {
      status = await call("gitStatus", { sessionId: this.sessionId });
    } catch (error) {
      if (generation !== this.generation) return;
      this.nodes.changes.replaceChildren();
      this.note(this.nodes.changesNote, error.message);
      return;
    }
    if (generation !== this.generation) return;
    this.nodes.changes.replaceChildren();
    if (status === null) {
      this.nodes.head.textContent = "";
      this.note(this.nodes.changesNote, "No repository: the workspace is not a Git repository root.");
      return;
    }
    const branch = status.headRef ? shownPath(status.headRef).replace(/^refs\/heads\//, "") : "detached";
    this.nodes.head.textContent = status.head
      ? `${branch} at ${status.head.slice(0, 12)}`
      : `${branch} (no commits yet)`;
    const total = AREAS.reduce((n, [area]) => n + status[area].length, 0);
    this.note(this.nodes.changesNote, total ? "" : "No changes.");
    for (const [area, title] of AREAS) {
      const entries = status[area];
      if (!entries.length) continue;
      this.nodes.changes.append(
        el("h4", {}, `${title} (${entries.length})`),
        el(
          "ul",
          { className: "changes", dataset: { area } },
          ...entries.map((entry) =>
            el(
              "li",
              { dataset: { area, path: entry.path, change: entry.change } },
              el(
                "button",
                { type: "button", className: "link", onclick: () => this.showDiff(area, entry.path) },
                el("span", { className: `badge change-${entry.change}` }, area === "untracked" ? "?" : LETTERS[entry.change] || "?"),
                " ",
                el("span", { className: "path" }, shownPath(entry.path)),
              ),
            ),
          ),
        ),
      );
    }
  }

  /** A status again after files changed (at most one a second: a status reads the tree). */
  changesSoon() {
    if (this.changesTimer !== null) return;
    const generation = this.generation;
    this.changesTimer = setTimeout(() => {
      this.changesTimer = null;
      if (generation === this.generation) this.loadChanges(generation);
    }, 1000);
  }

  clearDiff() {
    this.nodes.diffTitle.textContent = "";
    this.nodes.diff.textContent = "";
    this.nodes.diff.hidden = true;
    this.note(this.nodes.diffNote, "");
  }

  async showDiff(area, path) {
    this.diffing += 1;
    const diffing = this.diffing;
    this.clearDiff();
    this.nodes.diffTitle.textContent = `${area}: ${shownPath(path)}`;
    let diff;
    try {
      diff = await this.api.call("gitDiff", { sessionId: this.sessionId, area, path });
    } catch (error) {
      if (diffing === this.diffing) this.note(this.nodes.diffNote, error.message);
      return;
    }
    if (diffing !== this.diffing) return;
    if (diff === null) {
      this.note(this.nodes.diffNote, "No repository.");
    } else if (diff.kind === "text") {
      this.nodes.diff.textContent = diff.patch;
      this.nodes.diff.hidden = false;
    } else if (diff.kind === "binary") {
      this.note(this.nodes.diffNote, `Binary files differ (${diff.oldSize} → ${diff.newSize} bytes).`);
    } else if (diff.kind === "unchanged") {
      this.note(this.nodes.diffNote, "No difference.");
    } else if (diff.kind === "unsupported") {
      this.note(this.nodes.diffNote, `This difference cannot be shown (${diff.reason}).`);
    } else {
      this.note(this.nodes.diffNote, `Unknown answer (${String(diff.kind)}).`);
    }
  }

  // ------------------------------------------------------------ Files (listFiles, watchFiles)

  /** List ``directory`` (bytesBase64, null: the root) from its first page and watch it. */
  enter(directory) {
    this.listing += 1;
    const listing = this.listing;
    this.stopWatch();
    this.directory = directory;
    this.nextAfter = null;
    this.pagesShown = 0;
    this.loads = Promise.resolve();
    this.renderCrumbs();
    this.nodes.files.replaceChildren();
    this.loadFiles(listing, true);
    this.watch(listing);
  }

  renderCrumbs() {
    const { el } = this.api;
    const crumbs = [el("button", { type: "button", className: "link crumb", onclick: () => this.enter(null) }, "workspace")];
    if (this.directory !== null) {
      const raw = fromBase64(this.directory);
      let start = 0;
      for (let i = 0; i <= raw.length; i++) {
        if (i < raw.length && raw[i] !== SLASH) continue;
        const prefix = toBase64(raw.subarray(0, i));
        crumbs.push(
          " / ",
          el(
            "button",
            { type: "button", className: "link crumb", onclick: () => this.enter(prefix) },
            displayName(raw.subarray(start, i)),
          ),
        );
        start = i + 1;
      }
    }
    this.nodes.crumbs.replaceChildren(...crumbs);
  }

  /** ``first``: reread from the beginning, as many pages as were shown (a change must
   * not undo the user's paging); else the next page. Loads of one listing run one at a
   * time, so a reread and a "More files" never interleave their cursors. */
  loadFiles(listing, first) {
    this.loads = this.loads
      .then(() => this.loadPages(listing, first))
      .catch((error) => this.note(this.nodes.filesNote, String(error))); // keeps the chain going
    return this.loads;
  }

  async loadPages(listing, first) {
    if (listing !== this.listing) return;
    const wanted = first ? Math.max(1, this.pagesShown) : 1;
    const entries = [];
    let after = first ? null : this.nextAfter;
    let pages = 0;
    try {
      do {
        const page = await this.api.call("listFiles", {
          sessionId: this.sessionId,
          path: this.directory === null ? null : { bytesBase64: this.directory },
          after,
        });
        if (listing !== this.listing) return;
        entries.push(...page.entries);
        after = page.nextAfter;
        pages += 1;
      } while (pages < wanted && after !== null);
    } catch (error) {
      if (listing === this.listing) this.note(this.nodes.filesNote, error.message);
      return;
    }
    if (first) this.nodes.files.replaceChildren();
    this.pagesShown = first ? pages : this.pagesShown + 1;
    this.nextAfter = after;
    this.nodes.filesMore.hidden = after === null;
    this.nodes.files.append(...entries.map((entry) => this.fileItem(entry)));
    const count = this.nodes.files.children.length;
    this.note(this.nodes.filesNote, count ? "" : "Empty directory.");
  }

  fileItem(entry) {
    const { el } = this.api;
    const path = entry.path.bytesBase64;
    const raw = fromBase64(path);
    const name = displayName(raw.subarray(raw.lastIndexOf(SLASH) + 1));
    const open =
      entry.kind === "directory" ? () => this.enter(path) : entry.kind === "file" ? () => this.preview(path) : null;
    const label = el("span", { className: "name" }, entry.kind === "directory" ? `${name}/` : name);
    return el(
      "li",
      { dataset: { kind: entry.kind, path } },
      open ? el("button", { type: "button", className: "link", onclick: open }, label) : label,
      el("span", { className: "meta" }, entry.kind === "file" ? ` ${entry.size} bytes` : ` ${entry.kind}`),
    );
  }

  watch(listing) {
    this.filesWatch = this.api.subscribe(
      "watchFiles",
      { sessionId: this.sessionId, path: this.directory === null ? null : { bytesBase64: this.directory } },
      {
        onUpdate: (update) => {
          if (listing !== this.listing) return;
          if (update.kind === "ready" || update.kind === "changed") {
            // "ready": anything may have changed between the first listing and the
            // watch's own scan. Notifications coalesce; one reread after a burst is enough.
            clearTimeout(this.reloadTimer);
            this.reloadTimer = setTimeout(() => {
              if (listing === this.listing) this.loadFiles(listing, true);
            }, 200);
            if (update.kind === "changed") this.changesSoon();
          } else if (update.kind === "unavailable") {
            // This listing ends here: a reread still in flight was answered before the
            // directory went, and must not bring its entries back.
            this.listing += 1;
            clearTimeout(this.reloadTimer);
            this.nodes.files.replaceChildren(); // its entries are gone with it
            this.nodes.filesMore.hidden = true;
            this.note(this.nodes.filesNote, `This directory was ${update.reason}.`);
          } else if (update.kind === "error") {
            this.note(this.nodes.filesNote, `Watching stopped: ${update.message}`);
          }
        },
        onFinish: (how) => {
          if (listing !== this.listing) return;
          this.filesWatch = null;
          if (how.error) this.note(this.nodes.filesNote, `Watching stopped: ${how.error.message}`);
          // A dropped connection (not an end or an error): watch again, and reread.
          if (how.dropped) {
            this.reloadTimer = setTimeout(() => {
              if (listing !== this.listing) return;
              this.loadFiles(listing, true);
              this.watch(listing);
            }, 2000);
          }
        },
      },
    );
  }

  stopWatch() {
    clearTimeout(this.reloadTimer);
    if (this.filesWatch) this.filesWatch.close();
    this.filesWatch = null;
  }

  // ------------------------------------------------------------ preview (readFile)

  clearPreview() {
    this.nodes.previewTitle.textContent = "";
    this.nodes.previewText.textContent = "";
    this.nodes.previewText.hidden = true;
    this.nodes.previewImage.hidden = true;
    this.nodes.previewImage.removeAttribute("src");
    if (this.imageUrl) URL.revokeObjectURL(this.imageUrl);
    this.imageUrl = null;
    this.note(this.nodes.previewNote, "");
  }

  stopRead() {
    if (this.read) this.read.close();
    this.read = null;
  }

  /** Read one file through the readFile subscription; show it once it is verified. */
  preview(path) {
    this.stopRead();
    this.clearPreview();
    const shown = shownPath(path);
    this.nodes.previewTitle.textContent = shown;
    this.note(this.nodes.previewNote, "Reading…");
    this.reading += 1;
    const reading = this.reading;
    const state = { begin: null, chunks: [], received: 0, end: null, failed: null };
    const fail = (message) => {
      if (state.failed === null) state.failed = message;
      this.stopRead();
      this.note(this.nodes.previewNote, message);
    };
    const read = this.api.subscribe(
      "readFile",
      { sessionId: this.sessionId, path: { bytesBase64: path }, expectedVersion: null },
      {
        onUpdate: (update) => {
          if (reading !== this.reading || state.failed) return;
          const problem = this.take(state, update);
          if (problem) fail(problem);
        },
        onFinish: (how) => {
          if (reading !== this.reading || state.failed) return;
          this.read = null;
          if (how.error) this.note(this.nodes.previewNote, `${how.error.type}: ${how.error.message}`);
          else if (state.outcome) this.note(this.nodes.previewNote, state.outcome);
          else if (!state.end) this.note(this.nodes.previewNote, "The read ended incomplete (no end).");
          else this.show(reading, path, state).catch((error) => fail(String(error)));
        },
      },
    );
    this.read = read;
  }

  /** One update of a read into ``state``; a message when the capture is inconsistent. */
  take(state, update) {
    switch (update.kind) {
      case "begin":
        if (state.begin) return "The Host began the read twice.";
        if (!(update.size >= 0 && update.size <= MAX_PREVIEW_BYTES)) return "The file is too large to preview.";
        state.begin = update;
        return null;
      case "chunk": {
        if (!state.begin || state.end) return "A chunk arrived outside its read.";
        if (update.offset !== state.received) return "A chunk arrived out of order.";
        const bytes = fromBase64(update.bytesBase64);
        if (state.received + bytes.length > state.begin.size) return "The file sent more bytes than announced.";
        state.chunks.push(bytes);
        state.received += bytes.length;
        return null;
      }
      case "end":
        if (!state.begin || state.end) return "An end arrived outside its read.";
        state.end = update;
        return null;
      case "absent":
        state.outcome = "No file has this name any more.";
        return null;
      case "changed":
        state.outcome = "The file kept changing while it was read; try again.";
        return null;
      case "binary":
        state.outcome = `Binary file (${update.size} bytes): no preview.`;
        return null;
      case "unsupported":
        state.outcome = `Not a regular file (${update.fileKind}): no preview.`;
        return null;
      default:
        return `Unknown read update (${String(update.kind)}).`;
    }
  }

  async show(reading, path, state) {
    const { begin, end } = state;
    if (end.size !== begin.size || state.received !== end.size || end.version !== begin.version) {
      this.note(this.nodes.previewNote, "The read does not add up (size or version); not shown.");
      return;
    }
    if (!(crypto && crypto.subtle)) {
      this.note(this.nodes.previewNote, "This page cannot verify the file here (needs https or localhost).");
      return;
    }
    const bytes = new Uint8Array(state.received);
    let offset = 0;
    for (const chunk of state.chunks) {
      bytes.set(chunk, offset);
      offset += chunk.length;
    }
    state.chunks = [];
    const digest = await sha256(bytes);
    if (reading !== this.reading) return;
    if (digest !== end.digest) {
      this.note(this.nodes.previewNote, "The file's SHA-256 does not match; not shown.");
      return;
    }
    if (begin.content === "text") {
      let text;
      try {
        text = strict.decode(bytes);
      } catch {
        this.note(this.nodes.previewNote, "The text is not UTF-8; not shown.");
        return;
      }
      this.note(this.nodes.previewNote, text ? `${begin.size} bytes` : "Empty file.");
      this.nodes.previewText.textContent = text;
      this.nodes.previewText.hidden = false;
    } else if (begin.content === "image" && IMAGE_TYPES.has(begin.mimeType)) {
      this.imageUrl = URL.createObjectURL(new Blob([bytes], { type: begin.mimeType }));
      this.nodes.previewImage.alt = shownPath(path);
      this.nodes.previewImage.src = this.imageUrl;
      this.nodes.previewImage.hidden = false;
      this.note(this.nodes.previewNote, `${begin.mimeType}, ${begin.size} bytes`);
    } else {
      this.note(this.nodes.previewNote, `No preview for ${begin.content} (${begin.mimeType}).`);
    }
  }
}
