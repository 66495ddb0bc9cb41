// The #bytes-by-stack icicle (report/html_stacks.py): lays out the static boxes by their
// data attributes, filters by kind and by step (the whole run, or the steady-state steps),
// zooms on click. Reads only the page's own attributes and
// writes styles: no text from the run goes through markup here.
(function () {
  'use strict';
  var box = document.getElementById('stacks-box');
  if (!box) return;
  var ROW = 24;
  var boxes = Array.prototype.slice.call(box.querySelectorAll('.sbox'));
  var byId = {}, kids = {};
  boxes.forEach(function (b) {
    byId[b.dataset.id] = b;
    (kids[b.dataset.parent] = kids[b.dataset.parent] || []).push(b);
  });
  var kind = 'all', step = 'all', zoom = null;

  function weight(b) {
    if (step === 'steady') {
      return kind === 'all' ? +b.dataset.steady : +b.dataset['steady' + kind.charAt(0).toUpperCase() + kind.slice(1)];
    }
    return kind === 'all' ? +b.dataset.bytes : +b.dataset[kind];
  }

  function place(b, x, w, depth) {
    b.style.display = w > 0 ? '' : 'none';
    b.style.left = (x * 100) + '%';
    b.style.width = (w * 100) + '%';
    b.style.top = (depth * ROW) + 'px';
  }

  // children share their parent's span by weight (a parent's own bytes leave a gap); the
  // outermost frames share the whole width
  function layout(parentId, x, w, depth) {
    var list = kids[parentId] || [], total = 0, deepest = depth;
    if (parentId === '-1') list.forEach(function (c) { total += weight(c); });
    else total = weight(byId[parentId]);
    list.forEach(function (c) {
      var cw = total > 0 ? w * weight(c) / total : 0;
      place(c, x, cw, depth);
      if (cw > 0) deepest = Math.max(deepest, layout(c.dataset.id, x, cw, depth + 1));
      x += cw;
    });
    return deepest;
  }

  function draw() {
    boxes.forEach(function (b) { b.style.display = 'none'; });
    var depth;
    if (zoom === null) {
      depth = layout('-1', 0, 1, 0);
    } else {  // the zoomed frame and its ancestors span the width
      var chain = [], b = zoom;
      while (b) { chain.unshift(b); b = byId[b.dataset.parent]; }
      chain.forEach(function (c, i) { place(c, 0, weight(c) > 0 ? 1 : 0, i); });
      depth = layout(zoom.dataset.id, 0, weight(zoom) > 0 ? 1 : 0, chain.length);
    }
    box.style.height = ((depth + 1) * ROW) + 'px';
    box.dataset.kind = kind;
    box.dataset.step = step;
    box.dataset.zoom = zoom ? zoom.dataset.id : '';
  }

  box.addEventListener('click', function (ev) {
    var link = ev.target.closest('a');
    if (link) {  // a leaf's timeline link selects its site's moments (the site row's click)
      var row = link.dataset.siteRow && document.getElementById(link.dataset.siteRow);
      if (row) row.click();
      return;
    }
    var b = ev.target.closest('.sbox');
    if (!b) return;
    zoom = zoom === b ? null : b;  // a click zooms to the frame, a second one back out
    draw();
  });
  var tools = document.getElementById('stacks-tools');
  if (tools) tools.addEventListener('click', function (ev) {
    var btn = ev.target.closest('button');
    if (!btn) return;
    var attr = btn.dataset.kind !== undefined ? 'kind' : 'step';
    if (attr === 'kind') kind = btn.dataset.kind; else step = btn.dataset.step;
    Array.prototype.forEach.call(tools.querySelectorAll('button[data-' + attr + ']'), function (x) {
      x.setAttribute('aria-pressed', x === btn ? 'true' : 'false');
    });
    draw();
  });
  draw();
})();
