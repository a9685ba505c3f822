// Making elements: SVG ones (`svg`) and HTML ones (`html`), appended to a parent when given.

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attrs = {}, parent = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

export function html(tag, cls, text, parent) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

export const $ = (selector) => document.querySelector(selector);
