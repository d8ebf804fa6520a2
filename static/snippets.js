//! Snippets that point a client of one's own at this lab: curl, Python (urllib3 and tenacity),
//! Node and Go, read from /static/snippets.json (tested as printed in tests/api/snippets.rs)
//! with this lab's endpoint URL put in for the placeholder, each with a copy button.

import { say } from './controls.js';

export function createSnippets(root, toggle, url) {
  const list = root.querySelector('[data-snippet-list]');
  let loaded = false;

  async function load() {
    if (loaded) return;
    loaded = true;
    let data;
    try {
      const res = await fetch('/static/snippets.json');
      data = await res.json();
    } catch {
      loaded = false;
      list.textContent = 'The snippets could not be loaded; press the button again to try again.';
      return;
    }
    list.replaceChildren(...data.snippets.map((s) => snippet(s, s.code.replaceAll(data.placeholder, url))));
  }
  // Shown beside the URL's copy button only when asked for, so the page keeps its height, and
  // fetched the first time, so the page's start costs nothing more.
  toggle.addEventListener('click', () => {
    root.hidden = !root.hidden;
    toggle.setAttribute('aria-expanded', String(!root.hidden));
    if (!root.hidden) load();
  });
}

function snippet(s, code) {
  const figure = document.createElement('figure');
  figure.className = 'snippet';
  figure.dataset.snippet = s.id;
  const caption = document.createElement('figcaption');
  const title = document.createElement('span');
  title.textContent = s.title;
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.className = 'secondary small';
  copy.textContent = 'copy';
  copy.setAttribute('aria-label', `copy the ${s.title} snippet`);
  const pre = document.createElement('pre');
  const codeEl = document.createElement('code');
  codeEl.textContent = code;
  codeEl.dataset.lang = s.lang;
  pre.append(codeEl);
  pre.tabIndex = 0;
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(code);
      say(`${s.title} snippet copied.`);
    } catch {
      getSelection().selectAllChildren(codeEl);
      say(`The ${s.title} snippet is selected: press Ctrl+C (⌘C) to copy it.`);
    }
  });
  caption.append(title, copy);
  figure.append(caption, pre);
  return figure;
}
