// Model answers as Markdown, built as DOM nodes: headings, paragraphs, emphasis, code
// spans and fenced code, lists, quotes, rules, tables and links.
//
// Safe by construction: every piece of the answer becomes a text node, so raw HTML in
// an answer shows as the text it is (there is no HTML pass at all), and a link becomes
// an <a> only for http(s) and mailto addresses; any other link (javascript:, data:, ...)
// stays the literal text the model wrote. Nothing here assigns markup from a string.

import { el } from "./dom.js";

const PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
const SAFE_LINK = /^(https?:\/\/|mailto:)/i;
const FENCE = /^ {0,3}(`{3,}|~{3,})\s*(.*)$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

const isSpace = (char) => char === undefined || /\s/.test(char);
const isPunctuation = (char) => char !== undefined && PUNCTUATION.includes(char);
const isWord = (char) => char !== undefined && /[\p{L}\p{N}]/u.test(char);

/** Whether the run of `size` delimiters at `at` can open (or close) emphasis, after
 * CommonMark's flanking rules: no `__init__`-style underscores inside words. */
function canOpen(text, at, size) {
  const before = text[at - 1];
  const next = text[at + size];
  const left = !isSpace(next) && (!isPunctuation(next) || isSpace(before) || isPunctuation(before));
  return left && (text[at] !== "_" || !isWord(before));
}

function canClose(text, at, size) {
  const before = text[at - 1];
  const next = text[at + size];
  const right = !isSpace(before) && (!isPunctuation(before) || isSpace(next) || isPunctuation(next));
  return right && (text[at] !== "_" || !isWord(next));
}

function closingDelimiter(text, from, marker) {
  for (let at = text.indexOf(marker, from); at !== -1; at = text.indexOf(marker, at + 1)) {
    if (at > from && canClose(text, at, marker.length)) return at;
  }
  return -1;
}

/** `[text](url)` starting at `at`: {label, url, end} or null. */
function linkAt(text, at) {
  const close = text.indexOf("](", at);
  if (close === -1 || text.slice(at + 1, close).includes("\n\n")) return null;
  const end = text.indexOf(")", close + 2);
  if (end === -1) return null;
  return { label: text.slice(at + 1, close), url: text.slice(close + 2, end).trim(), end: end + 1 };
}

/** Appends the inline Markdown of `text` to `parent`. */
function inline(parent, text) {
  let plain = "";
  const flush = () => {
    if (plain) parent.append(document.createTextNode(plain));
    plain = "";
  };
  let at = 0;
  while (at < text.length) {
    const char = text[at];
    if (char === "\\" && isPunctuation(text[at + 1])) {
      plain += text[at + 1];
      at += 2;
    } else if (char === "\n") {
      flush();
      parent.append(el("br"));
      at += 1;
    } else if (char === "`") {
      const run = /^`+/.exec(text.slice(at))[0];
      const end = text.indexOf(run, at + run.length);
      if (end === -1) {
        plain += run;
      } else {
        flush();
        parent.append(el("code", {}, text.slice(at + run.length, end).replace(/^ (.*) $/s, "$1")));
        at = end;
      }
      at += run.length;
    } else if (char === "*" || char === "_" || (char === "~" && text[at + 1] === "~")) {
      const marker = text[at + 1] === char ? char + char : char;
      const end = canOpen(text, at, marker.length)
        ? closingDelimiter(text, at + marker.length, marker)
        : -1;
      if (end === -1 || end === at + marker.length) {
        plain += marker;
        at += marker.length;
      } else {
        flush();
        const tag = marker === "~~" ? "del" : marker.length === 2 ? "strong" : "em";
        const node = el(tag);
        inline(node, text.slice(at + marker.length, end));
        parent.append(node);
        at = end + marker.length;
      }
    } else if (char === "[" && linkAt(text, at) && SAFE_LINK.test(linkAt(text, at).url)) {
      const link = linkAt(text, at);
      flush();
      const node = el("a", { href: link.url, rel: "noopener noreferrer nofollow", target: "_blank" });
      inline(node, link.label);
      parent.append(node);
      at = link.end;
    } else {
      plain += char;
      at += 1;
    }
  }
  flush();
}

function cells(line) {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((cell) => cell.trim());
}

function table(lines) {
  const head = el("tr", {}, ...cells(lines[0]).map((cell) => { const th = el("th"); inline(th, cell); return th; }));
  const body = lines.slice(2).map((line) =>
    el("tr", {}, ...cells(line).map((cell) => { const td = el("td"); inline(td, cell); return td; })));
  return el("div", { className: "table" }, el("table", {}, el("thead", {}, head), el("tbody", {}, ...body)));
}

/** One list starting at lines[start]: its element and the index after it. */
function list(lines, start) {
  const ordered = /\d/.test(ITEM.exec(lines[start])[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered) node.start = parseInt(ITEM.exec(lines[start])[2], 10);
  let at = start;
  while (at < lines.length) {
    const item = ITEM.exec(lines[at]);
    if (!item || /\d/.test(item[2]) !== ordered) break;
    const content = [item[3]];
    at += 1;
    // Indented lines (and blank lines before more of them) belong to the item.
    while (at < lines.length && (/^\s{2,}\S/.test(lines[at]) ||
           (lines[at].trim() === "" && /^\s{2,}\S/.test(lines[at + 1] || "")))) {
      content.push(lines[at].replace(/^ {1,4}/, ""));
      at += 1;
    }
    node.append(el("li", {}, ...blocks(content)));
  }
  return [node, at];
}

/** The block structure of `lines` as a list of elements. */
function blocks(lines) {
  const out = [];
  let paragraph = [];
  const endParagraph = () => {
    if (!paragraph.length) return;
    const node = el("p");
    inline(node, paragraph.join("\n"));
    out.push(node);
    paragraph = [];
  };
  for (let at = 0; at < lines.length;) {
    const line = lines[at];
    const fence = FENCE.exec(line);
    if (fence && !(fence[1][0] === "`" && fence[2].includes("`"))) {
      endParagraph();
      const closing = new RegExp(`^ {0,3}${fence[1][0]}{${fence[1].length},}\\s*$`);
      let end = at + 1;
      while (end < lines.length && !closing.test(lines[end])) end += 1;
      const code = el("pre", { className: "code" }, el("code", {}, lines.slice(at + 1, end).join("\n")));
      if (fence[2]) code.dataset.language = fence[2].split(/\s/)[0];
      out.push(code);
      at = end + 1; // an unclosed fence runs to the end of the answer
    } else if (line.trim() === "") {
      endParagraph();
      at += 1;
    } else if (HEADING.test(line)) {
      endParagraph();
      const [, hashes, title] = HEADING.exec(line);
      const node = el(`h${hashes.length}`);
      inline(node, title || "");
      out.push(node);
      at += 1;
    } else if (RULE.test(line) && !(paragraph.length && /^ {0,3}-+\s*$/.test(line))) {
      endParagraph();
      out.push(el("hr"));
      at += 1;
    } else if (QUOTE.test(line)) {
      endParagraph();
      const quoted = [];
      while (at < lines.length && QUOTE.test(lines[at])) quoted.push(QUOTE.exec(lines[at++])[1]);
      out.push(el("blockquote", {}, ...blocks(quoted)));
    } else if (ITEM.test(line)) {
      endParagraph();
      const [node, end] = list(lines, at);
      out.push(node);
      at = end;
    } else if (line.includes("|") && TABLE_RULE.test(lines[at + 1] || "") && lines[at + 1].includes("-")) {
      endParagraph();
      let end = at + 2;
      while (end < lines.length && lines[end].includes("|") && lines[end].trim()) end += 1;
      out.push(table(lines.slice(at, end)));
      at = end;
    } else {
      paragraph.push(line);
      at += 1;
    }
  }
  endParagraph();
  return out;
}

/** `text` (a model's answer) rendered as Markdown, in a container element. */
export function markdown(text, className = "") {
  return el("div", { className }, ...blocks(text.replace(/\r\n?/g, "\n").split("\n")));
}
