// Formulas (and tables) wider than their column scroll sideways in their own box (companion.css). This marks
// each such box with the side that has more (classes moe-more-left / moe-more-right: a shadow
// there is the cue to scroll), and makes it focusable so that a keyboard reader can scroll it
// with the arrow keys. Re-measured on scroll and when the window changes size. Punctuation right
// after an inline formula that scrolls is kept with it.
(() => {
  // tables scroll too at phone width (companion.css): focusable then, like the formulas
  const SELECTOR = 'mjx-container[display="true"], span.math, .bd-article table:not(.dataframe)';
  const mark = el => {
    // the formula's own width (scrollWidth also counts MathJax's hidden assistive MathML and
    // italic overhangs, a few px over in formulas that fit)
    const math = el.querySelector('mjx-math');
    const width = math ? math.getBoundingClientRect().width : el.scrollWidth;
    const more = width - el.clientWidth > 2;
    el.classList.toggle('moe-scrolls', more);
    el.classList.toggle('moe-more-left', more && el.scrollLeft > 1);
    el.classList.toggle('moe-more-right',
                        more && el.scrollLeft + el.clientWidth < el.scrollWidth - 2);
    if (more && !el.hasAttribute('tabindex')) {
      el.setAttribute('tabindex', '0');
      el.dataset.moeTabindex = '1';
    } else if (!more && el.dataset.moeTabindex) {
      el.removeAttribute('tabindex');
      delete el.dataset.moeTabindex;
    }
  };
  // an inline formula that scrolls fills its line, so the punctuation after it would wrap onto
  // a line of its own (". Since"): it goes into the formula's box, at its end
  const PUNCT = /^[.,;:!?)\]]+/;
  const keepPunctuation = el => {
    const next = el.nextSibling;
    if (!el.matches('span.math') || !el.classList.contains('moe-scrolls') || !next
        || next.nodeType !== Node.TEXT_NODE || !PUNCT.test(next.data)) return;
    const punct = PUNCT.exec(next.data)[0];
    next.data = next.data.slice(punct.length);
    const tail = document.createElement('span');
    tail.className = 'moe-trailing';
    tail.textContent = punct;
    el.appendChild(tail);
  };
  const all = () => document.querySelectorAll(SELECTOR).forEach(el => {
    mark(el);
    keepPunctuation(el);
  });
  const start = () => {
    all();
    document.querySelectorAll(SELECTOR).forEach(el =>
      el.addEventListener('scroll', () => mark(el), {passive: true}));
    let pending = 0;
    window.addEventListener('resize', () => {
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(all);
    });
  };
  const ready = () => (window.MathJax && MathJax.startup && MathJax.startup.promise)
    ? MathJax.startup.promise.then(start) : start();
  if (document.readyState === 'complete') ready();
  else window.addEventListener('load', ready);
})();
