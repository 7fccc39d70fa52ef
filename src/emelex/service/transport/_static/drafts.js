// The running answer as it streams (the watchLive subscription's `draft` updates), as
// text nodes only.

import { $, el } from "./dom.js";

/** The running answer as it streams (the watchLive subscription's `draft` updates): one
 * provisional row per model step, text only, removed when the Host clears the drafts
 * (right after the committed rows arrived) or the invocation stops running. */
export const drafts = {
  nodes: new Map(), // "invocation/step" -> {node, body, thinking, details, textLength, thinkingLength}

  clear(invocationId = null, step = null) {
    for (const [key, draft] of this.nodes) {
      if (invocationId !== null && draft.invocationId !== invocationId) continue;
      if (step !== null && draft.step !== step) continue;
      draft.node.remove();
      this.nodes.delete(key);
    }
  },

  keepRunning(runningId) {
    for (const draft of [...this.nodes.values()]) {
      if (draft.invocationId !== runningId) this.clear(draft.invocationId);
    }
  },

  apply(update) {
    const key = `${update.invocationId}/${update.step}`;
    let draft = this.nodes.get(key);
    if (!draft) {
      const body = el("div", { className: "body" });
      const thinking = el("pre", { className: "thinking" });
      const details = el("details", { className: "reasoning", hidden: true },
        el("summary", {}, "Reasoning"), thinking);
      const node = el(
        "li",
        { className: "row assistant draft", dataset: { invocationId: update.invocationId, step: String(update.step) } },
        el("div", { className: "role" }, "assistant · streaming"),
        details,
        body,
      );
      draft = { node, body, thinking, details, invocationId: update.invocationId, step: update.step,
        textLength: 0, thinkingLength: 0 };
      this.nodes.set(key, draft);
      $("drafts").append(node);
    }
    draft.textLength = appendAt(draft.body, draft.textLength, update.textOffset, update.text);
    draft.thinkingLength = appendAt(draft.thinking, draft.thinkingLength, update.thinkingOffset, update.thinking);
    draft.details.hidden = draft.thinkingLength === 0;
    draft.node.scrollIntoView({ block: "end" });
  },
};

/** Appends the part of `text` (starting at code point `offset`) that `node` lacks, as a
 * text node; returns the new length in code points. */
function appendAt(node, length, offset, text) {
  if (!text) return length;
  const points = Array.from(text);
  if (offset > length || offset + points.length <= length) return length; // a gap or nothing new
  node.append(document.createTextNode(points.slice(length - offset).join("")));
  return offset + points.length;
}

