// Invocations that ended with nothing committed (the queue snapshot's `settled`): their
// prompt is in no history row, so each is shown in place as a marker, text nodes only.

import { el } from "./dom.js";

const NOTES = {
  stopped: "stopped before anything was committed",
  failed: "failed before anything was committed",
  interrupted: "interrupted (the Host stopped) before anything was committed",
};

const REF_CHARS = 16; // of a stop's operation reference in the note (the title has it all)

const sequenceOf = (node) =>
  node.classList.contains("settled")
    ? Number(node.dataset.finishedSequence)
    : Number(String(node.dataset.position || "0").split(".")[0]);

/** What happened, in words: how it ended, when, and which stop asked for it. */
export function settledNote(item) {
  let note = NOTES[item.outcome] || `${item.outcome} before anything was committed`;
  if (item.outcome === "stopped" && !item.started) note += " (removed from the queue before it ran)";
  const parts = [note];
  if (item.finishedAtMs !== null) parts.push(new Date(item.finishedAtMs).toLocaleString());
  if (item.stopOperation !== null) {
    const ref = item.stopOperation;
    parts.push(`by stop ${ref.length > REF_CHARS ? `${ref.slice(0, REF_CHARS - 1)}…` : ref}`);
  }
  return parts.join(" · ");
}

function marker(item) {
  return el(
    "li",
    {
      className: "row user settled",
      dataset: {
        invocationId: item.invocationId,
        finishedSequence: String(item.finishedSequence),
        outcome: item.outcome,
      },
    },
    el("div", { className: "role" }, `user · ${item.work === "send" ? "message" : item.work}`),
    el("div", { className: "body" }, item.textClipped ? `${item.text}…` : item.text),
    el(
      "div",
      { className: "settled-note", title: item.stopOperation ? `stop ${item.stopOperation}` : "" },
      settledNote(item),
    ),
  );
}

/** Put `node` (of history sequence `sequence`) after every row and marker before it. */
function place(list, node, sequence, isMarker) {
  let before = null;
  for (let at = list.lastElementChild; at; at = at.previousElementSibling) {
    // A marker follows the rows of lower sequences; a row precedes markers of higher ones.
    const later = isMarker ? sequenceOf(at) >= sequence : sequenceOf(at) > sequence;
    if (!later) break;
    before = at;
  }
  list.insertBefore(node, before);
}

export const settled = {
  /** Append one history row, ahead of markers of later events. */
  addRow(list, node, sourceSequence) {
    place(list, node, sourceSequence, false);
  },

  /** Show exactly the snapshot's settled invocations (the newest the Host keeps). */
  show(list, items) {
    const wanted = new Map(items.map((item) => [item.invocationId, item]));
    for (const node of [...list.querySelectorAll("li.settled")]) {
      if (!wanted.has(node.dataset.invocationId)) node.remove();
      else wanted.delete(node.dataset.invocationId);
    }
    for (const item of wanted.values()) place(list, marker(item), item.finishedSequence, true);
  },
};
