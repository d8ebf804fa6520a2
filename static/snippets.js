//! Snippets that point a client of one's own at this lab: curl, Python (urllib3 and tenacity),
//! Node and Go, read from /static/snippets.json (tested as printed in tests/api/snippets.rs)
//! with this lab's endpoint URL put in for the placeholder, each with a copy button.

import { say } from './controls.js';

export function createSnippets(root, url) {
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
      list.textContent = 'The snippets could not be loaded; reopen this to try again.';
      return;
    }
    list.replaceChildren(...data.snippets.map((s) => snippet(s, s.code.replaceAll(data.placeholder, url))));
  }
  // Fetched the first time someone opens them, so the page's start costs nothing more.
  root.addEventListener('toggle', () => root.open && load());
  if (root.open) load();
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
