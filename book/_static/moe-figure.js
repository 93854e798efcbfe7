// Figures at full size on a phone: each image of a figure in the text column becomes a link to
// its own file (the SVG or PNG the page shows), opened by a tap, where the browser lets the
// reader zoom. On a narrow screen a line under the image says so (companion.css:
// .moe-figure-hint). An image already inside a link is left as it is. Only on a narrow screen
// (the hint's breakpoint, 40rem): on a wide one the figure is already at its size, and the
// printed book (a single page Chromium prints at a desktop width) must not link to the build's
// local image files.
(() => {
  const wrap = () => {
    if (!window.matchMedia('(max-width: 40rem)').matches) return;
    document.querySelectorAll('.bd-article figure img').forEach(img => {
      if (img.closest('a')) return;
      const link = document.createElement('a');
      link.className = 'moe-figure-link';
      link.href = img.getAttribute('src');
      link.title = 'Open the figure at full size';
      img.parentNode.insertBefore(link, img);
      link.appendChild(img);
      const hint = document.createElement('span');
      hint.className = 'moe-figure-hint';
      hint.textContent = 'Tap to open the figure at full size';
      link.appendChild(hint);
    });
  };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', wrap);
  else wrap();
})();
