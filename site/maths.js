// The maths of every page, typeset in the browser by KaTeX (bundled in assets/katex, no CDN):
// $...$, $$...$$, \(...\) and \[...\], as JupyterLab does. A classic deferred script, so it also
// runs when a page is opened straight from the disk (file://), where module scripts are refused.
function renderMaths() {
  if (!window.renderMathInElement) { return; }
  window.renderMathInElement(document.getElementById("content"), {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "\\[", right: "\\]", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
    ],
    ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code", "option"],
    throwOnError: false,
  });
  // the contents list and the pager repeat page titles, which hold maths too
  document.querySelectorAll(".site-toc, .site-pager").forEach((el) =>
    window.renderMathInElement(el, { delimiters: [{ left: "$", right: "$", display: false }], throwOnError: false }));
}

renderMaths();
