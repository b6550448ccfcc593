/* seqbook: readable search snippets.
 *
 * Sphinx builds each search result's snippet from the text of the page's main element. On these pages
 * that includes the theme's chrome (the download menu, the in-page table of contents and its print-only
 * copy, the previous/next links) and the TeX source of every formula, e.g. "\(W_a\)". This wraps
 * Search.htmlToText so that the chrome is dropped and each formula reads as plain text: "W_a", and
 * "\(A \in \mathbb{R}^{n \times d}\)" reads "A ∈ R^n × d". Jupyter Book loads every script in _static on
 * every page; where Sphinx's search is absent this does nothing.
 */
(() => {
  const CHROME = [
    ".bd-header-article", "#jb-print-docs-body", ".onlyprint", ".bd-sidebar-secondary",
    "#pst-secondary-sidebar-modal", ".prev-next-area", ".bd-footer-article", ".bd-footer-content",
    "button", ".toggle-details",
  ];
  const SYMBOLS = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η", theta: "θ",
    kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", xi: "ξ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ",
    phi: "φ", varphi: "φ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ",
    Sigma: "Σ", Phi: "Φ", Psi: "Ψ", Omega: "Ω", times: "×", cdot: "·", odot: "⊙", otimes: "⊗",
    oplus: "⊕", circledast: "⊛", in: "∈", le: "≤", leq: "≤", ge: "≥", geq: "≥", approx: "≈",
    ne: "≠", neq: "≠", infty: "∞", sum: "Σ", prod: "Π", top: "⊤", to: "→", rightarrow: "→",
    leftarrow: "←", mapsto: "↦", partial: "∂", nabla: "∇", ldots: "…", dots: "…", cdots: "⋯",
    sqrt: "√", propto: "∝", sim: "∼", pm: "±", ell: "ℓ", langle: "⟨", rangle: "⟩", lVert: "‖",
    rVert: "‖", Vert: "‖", mid: "|", quad: " ", qquad: " ", left: "", right: "", big: "", Big: "",
    bigl: "", bigr: "", displaystyle: "", tfrac: "", dfrac: "",
  };

  function texToText(tex) {
    return tex
      .replace(/\\[()[\]]/g, " ")
      .replace(/\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}/g, "($1)/($2)")
      .replace(/\\(?:mathbb|mathbf|mathrm|mathcal|mathit|boldsymbol|bm|text|textrm|operatorname|hat|tilde|bar|vec|overrightarrow|overleftarrow)\s*\{([^{}]*)\}/g, "$1")
      .replace(/\\([A-Za-z]+)/g, (match, name) => (name in SYMBOLS ? SYMBOLS[name] : name))
      .replace(/\\[,;:! ]/g, " ")
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  }

  function wrap() {
    // searchtools.js declares `const Search`, which is global but not a property of window.
    if (typeof Search === "undefined" || !Search.htmlToText || Search.htmlToText.seqbook) return;
    const original = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const page = new DOMParser().parseFromString(htmlString, "text/html");
      CHROME.forEach((query) => page.querySelectorAll(query).forEach((el) => el.remove()));
      page.querySelectorAll(".math").forEach((el) => { el.textContent = ` ${texToText(el.textContent)} `; });
      return original(page.documentElement.outerHTML, anchor);
    };
    Search.htmlToText.seqbook = true;
  }

  // searchtools.js is loaded after this file: wrap once every script has run, before Search.init.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wrap);
  else wrap();
})();
