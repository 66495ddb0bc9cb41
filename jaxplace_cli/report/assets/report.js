/* jaxplace HTML report: the timeline and the per-step chart, drawn on canvas from the page's
 * own JSON (no network). Every text from the data reaches the DOM through textContent. */
(function () {
  'use strict';
  var DATA = JSON.parse(document.getElementById('jaxplace-data').textContent);
  var TYPES = { f64: Float64Array, i32: Int32Array, u16: Uint16Array, u8: Uint8Array };
  function unpack(c) {
    var bin = atob(c.d), n = bin.length, buf = new Uint8Array(n);
    for (var i = 0; i < n; i++) buf[i] = bin.charCodeAt(i);
    return new TYPES[c.t](buf.buffer);
  }
  function fmtBytes(b) {
    if (b < 0) return 'size unknown';
    if (b < 1024) return b + ' B';
    var u = ['KiB', 'MiB', 'GiB', 'TiB'], v = b;
    for (var i = 0; i < u.length; i++) { v /= 1024; if (v < 1024 || i === u.length - 1) return v.toFixed(1) + ' ' + u[i]; }
    return b + ' B';
  }
  function fmtNs(ns) {
    var a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + ' ns';
    if (a < 1e6) return (ns / 1e3).toFixed(1) + ' \u00b5s';
    if (a < 1e9) return (ns / 1e6).toFixed(2) + ' ms';
    return (ns / 1e9).toFixed(3) + ' s';
  }
  function lowerBound(order, key, x) { // first position p with key[order[p]] >= x
    var lo = 0, hi = order.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (key[order[mid]] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function sortedBy(n, key, filter) {
    var idx = [];
    for (var i = 0; i < n; i++) if (!filter || filter(i)) idx.push(i);
    idx.sort(function (a, b) { return key[a] - key[b]; });
    return Int32Array.from(idx);
  }
  function showTip(tip, box, lines, mx, my) {
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    lines.forEach(function (l, i) {
      if (i) tip.appendChild(document.createTextNode('\n'));
      if (i === 0) { var b = document.createElement('b'); b.textContent = l; tip.appendChild(b); }
      else tip.appendChild(document.createTextNode(l));
    });
    tip.hidden = false;
    var w = box.clientWidth, tw = tip.offsetWidth;
    tip.style.left = Math.max(0, Math.min(mx + 14, w - tw - 4)) + 'px';
    tip.style.top = (my + 16) + 'px';
  }
  var KIND_COLORS = { jit: '#4c78a8', jnp: '#72b7b2', method: '#54a24b', prim: '#b8a21e', device_put: '#b279a2',
    device_get: '#e377c2', segment: '#9d755d' };
  var T_COLORS = ['#e8871e', '#d6404e', '#7b3fe4', '#888888'];

  var TL = DATA.timeline;
  var api = { selected: 0, select: function () {} };
  window.jaxplaceReport = api;
  if (TL) timeline(TL);
  if (TL && TL.memory && TL.memory.length && api.onView) memoryChart(TL.memory);
  stepChart(DATA.stepchart);

  function timeline(TL) {
    var box = document.getElementById('timeline-box'), canvas = document.getElementById('timeline-canvas');
    var tip = document.getElementById('tooltip'), ctx = canvas.getContext('2d');
    var O = { n: TL.ops.n }, R = { n: TL.tr.n };
    ['lane', 'ts', 'dur', 'name', 'kind', 'site', 'err', 'placed'].forEach(function (k) { O[k] = unpack(TL.ops[k]); });
    ['ts', 'src', 'dst', 'kind', 'bytes', 'flags', 'site', 'api'].forEach(function (k) { R[k] = unpack(TL.tr[k]); });
    var lanes = TL.lanes, nl = lanes.length, span = TL.span, detail = TL.detail;
    var stepStart = unpack(TL.steps.start), stepEnd = unpack(TL.steps.end), nSteps = TL.steps.n;
    var compTs = unpack(TL.compiles.ts), stepIdx = Int32Array.from({ length: nSteps }, function (_, i) { return i; });
    var laneOps = [], laneMax = [];
    for (var l = 0; l < nl; l++) {
      laneOps.push(sortedBy(O.n, O.ts, (function (ll) { return function (i) { return O.lane[i] === ll; }; })(l)));
      var m = 0;
      for (var j = 0; j < laneOps[l].length; j++) m = Math.max(m, O.dur[laneOps[l][j]]);
      laneMax.push(m);
    }
    var trOrder = sortedBy(R.n, R.ts);
    var LABEL_W = 96, TOP = 30, LANE_H = 34, H = TOP + nl * LANE_H + 6;
    var view = { v0: TL.steady[0], v1: TL.steady[1] };  // the steady-state steps (analysis decides)
    var section = document.getElementById('timeline');
    var lastTicks = [], labelled = 0, viewListeners = [];
    function setView(a, b) { // clamped inside the run, at least 200 ns wide
      var r = Math.min(Math.max(200, b - a), span);
      a = Math.max(0, Math.min(a, span - r));
      view.v0 = a; view.v1 = a + r;
    }
    var sel = { key: null, ops: new Uint8Array(O.n), tr: new Uint8Array(R.n), count: 0, devices: [] };
    var pinned = null;

    function W() { return Math.max(200, box.clientWidth); }
    function X(t) { return LABEL_W + (t - view.v0) / (view.v1 - view.v0) * (W() - LABEL_W); }
    function T(x) { return view.v0 + (x - LABEL_W) / (W() - LABEL_W) * (view.v1 - view.v0); }
    function laneY(l) { return TOP + l * LANE_H; }
    function laneMid(l) { return laneY(l) + LANE_H / 2; }
    function inWindow(t) { return detail.complete || (detail.window && t >= detail.window[0] && t <= detail.window[1]); }

    function draw() {
      var w = W(), dpr = window.devicePixelRatio || 1;
      if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(H * dpr)) {
        canvas.width = Math.round(w * dpr); canvas.height = Math.round(H * dpr); canvas.style.height = H + 'px';
      }
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, H);
      for (var l = 0; l < nl; l++) {
        ctx.fillStyle = l % 2 ? '#f7f8fa' : '#ffffff';
        ctx.fillRect(0, laneY(l), w, LANE_H);
      }
      ctx.save(); ctx.beginPath(); ctx.rect(LABEL_W, 0, w - LABEL_W, H); ctx.clip();
      drawSteps(w); drawAggregates(); drawOps(); drawTransfers(); drawCompiles();
      ctx.restore();
      drawLabels(w); drawAxis(w);
      var rng = document.getElementById('view-range');
      if (rng) rng.textContent = fmtNs(view.v0) + ' \u2013 ' + fmtNs(view.v1) + ' of ' + fmtNs(span) +
        ' (axis: time from ' + fmtNs(view.v0) + ')';
      section.dataset.startNs = String(Math.round(view.v0));
      section.dataset.endNs = String(Math.round(view.v1));
      viewListeners.forEach(function (fn) { fn(view.v0, view.v1, w, LABEL_W); });
    }
    function drawLabels(w) {
      ctx.fillStyle = '#ffffff'; ctx.fillRect(0, TOP, LABEL_W - 2, nl * LANE_H);
      ctx.font = '12px system-ui, sans-serif'; ctx.textBaseline = 'middle';
      for (var l = 0; l < nl; l++) {
        var hot = sel.devices.indexOf(lanes[l]) >= 0;
        ctx.fillStyle = hot ? '#c98c00' : '#1d2330';
        ctx.fillText((hot ? '\u25b6 ' : '') + lanes[l], 6, laneMid(l), LABEL_W - 10);
      }
      ctx.strokeStyle = '#d9dde4'; ctx.beginPath(); ctx.moveTo(LABEL_W - 0.5, 0); ctx.lineTo(LABEL_W - 0.5, H); ctx.stroke();
      (TL.groups || []).forEach(function (g, gi) { // a job: a rule above each process's lane group
        if (!gi || !g[1].length) return;
        var y = laneY(g[1][0]) + 0.5;
        ctx.strokeStyle = '#5b7cc0'; ctx.lineWidth = 2; ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(w, y); ctx.stroke();
        ctx.lineWidth = 1;
      });
    }
    function drawAxis(w) {
      // ticks relative to the view's start, in the unit their spacing needs (µs at one step),
      // at least 80 px apart so labels never overlap on a narrow screen
      ctx.fillStyle = '#ffffff'; ctx.fillRect(0, 0, LABEL_W - 2, TOP);
      var range = view.v1 - view.v0, raw = range / Math.max(1, Math.floor((w - LABEL_W) / 80));
      var p = Math.pow(10, Math.floor(Math.log10(raw)));
      var step = raw / p <= 1 ? p : raw / p <= 2 ? 2 * p : raw / p <= 5 ? 5 * p : 10 * p;
      var unit = range < 2e3 ? [1, 'ns'] : range < 2e6 ? [1e3, '\u00b5s'] : range < 2e9 ? [1e6, 'ms'] : [1e9, 's'];
      var digits = Math.max(0, -Math.floor(Math.log10(step / unit[0]) + 1e-9));
      ctx.font = '11px system-ui, sans-serif'; ctx.fillStyle = '#5d6675'; ctx.strokeStyle = '#e6e8ec';
      ctx.textBaseline = 'top';
      lastTicks = [];
      for (var k = 0; k * step <= range; k++) {
        var x = X(view.v0 + k * step), label = (k ? '+' : '') + (k * step / unit[0]).toFixed(digits) + ' ' + unit[1];
        ctx.beginPath(); ctx.moveTo(x + 0.5, 12); ctx.lineTo(x + 0.5, H); ctx.stroke();
        ctx.fillText(label, x + 3, 1);
        lastTicks.push(label);
      }
      ctx.fillText('steps', 6, 15);
    }
    function drawSteps(w) {
      if (!nSteps) return;
      var a = lowerBound(stepIdx, stepEnd, view.v0);
      var visible = 0;
      for (var i = a; i < nSteps && stepStart[i] <= view.v1; i++) visible++;
      var dense = visible > (w - LABEL_W) / 4;
      for (i = a; i < nSteps && stepStart[i] <= view.v1; i++) {
        var x0 = X(stepStart[i]), x1 = X(stepEnd[i]);
        if (!dense) {
          ctx.fillStyle = i % 2 ? 'rgba(80,120,200,0.06)' : 'rgba(80,120,200,0.0)';
          ctx.fillRect(x0, TOP, x1 - x0, nl * LANE_H);
        }
        ctx.fillStyle = i < TL.steps.warmup ? '#c9ccd3' : (i % 2 ? '#8aa4d6' : '#5b7cc0');
        ctx.fillRect(x0, 15, Math.max(1, x1 - x0 - (dense ? 0 : 1)), 11);
      }
    }
    function drawAggregates() {
      var B = TL.buckets;
      if (!B) return;
      var bw = B.width, wl = detail.window || [0, -1];
      Object.keys(B.ops).forEach(function (ls) {
        var l = +ls, rows = B.ops[ls];
        ctx.fillStyle = 'rgba(76,120,168,0.45)';
        rows.forEach(function (r) {
          var t0 = r[0] * bw, t1 = t0 + bw;
          if (t1 < view.v0 || t0 > view.v1 || (t0 >= wl[0] && t1 <= wl[1])) return;
          var frac = Math.min(1, r[2] / bw), h = Math.max(2, frac * (LANE_H - 8));
          ctx.fillRect(X(t0), laneY(l) + LANE_H - 4 - h, Math.max(1, X(t1) - X(t0) - 0.5), h);
        });
      });
      B.routes.forEach(function (route) {
        var s = route[0], d = route[1], k = route[2];
        ctx.strokeStyle = T_COLORS[k] || '#888';
        route[3].forEach(function (r) {
          var t = (r[0] + 0.5) * bw;
          if (t < view.v0 || t > view.v1 || (t >= wl[0] && t <= wl[1])) return;
          ctx.globalAlpha = Math.min(0.9, 0.15 + Math.log10(1 + r[1]) / 5);
          var x = X(t);
          ctx.beginPath(); ctx.moveTo(x, laneMid(s)); ctx.lineTo(x, laneMid(d)); ctx.stroke();
        });
      });
      ctx.globalAlpha = 1;
      if (detail.window) {
        ctx.fillStyle = 'rgba(255,200,0,0.08)';
        ctx.fillRect(X(wl[0]), TOP, X(wl[1]) - X(wl[0]), nl * LANE_H);
      }
    }
    function drawOps() {
      labelled = 0;
      for (var l = 0; l < nl; l++) {
        var ord = laneOps[l], y = laneY(l) + 5, h = LANE_H - 10;
        var p = lowerBound(ord, O.ts, view.v0 - laneMax[l]), lastPx = -1;
        for (; p < ord.length; p++) {
          var i = ord[p], t = O.ts[i];
          if (t > view.v1) break;
          var x0 = X(t), x1 = X(t + O.dur[i]);
          if (x1 < LABEL_W) continue;
          if (x1 - x0 < 1 && Math.floor(x0) === lastPx && !sel.ops[i]) continue;
          lastPx = Math.floor(x0);
          ctx.fillStyle = KIND_COLORS[TL.kinds[O.kind[i]]] || '#777';
          ctx.fillRect(x0, y, Math.max(1, x1 - x0), h);
          if (x1 - x0 > 40) { // wide enough: the op's name inside its bar
            var name = TL.names[O.name[i]], room = x1 - Math.max(x0, LABEL_W) - 6;
            if (room > 24) {
              var fit = Math.floor(room / 6.5), shown = name.length > fit ? name.slice(0, Math.max(1, fit - 1)) + '\u2026' : name;
              ctx.fillStyle = '#ffffff'; ctx.font = '11px system-ui, sans-serif'; ctx.textBaseline = 'middle';
              ctx.fillText(shown, Math.max(x0, LABEL_W) + 3, y + h / 2, room);
              labelled++;
            }
          }
          if (TL.errors[O.err[i]]) { ctx.strokeStyle = '#c53030'; ctx.lineWidth = 2; ctx.strokeRect(x0, y, Math.max(1, x1 - x0), h); }
          if (sel.ops[i]) { ctx.strokeStyle = '#f0b400'; ctx.lineWidth = 3; ctx.strokeRect(x0 - 1, y - 2, Math.max(3, x1 - x0 + 2), h + 4); }
        }
      }
      ctx.lineWidth = 1;
    }
    function drawTransfers() {
      var a = lowerBound(trOrder, R.ts, view.v0), b = lowerBound(trOrder, R.ts, view.v1 + 1);
      var dense = b - a > 3000, seen = dense ? new Set() : null;
      for (var p = a; p < b; p++) {
        var i = trOrder[p], x = X(R.ts[i]), s = R.src[i], d = R.dst[i];
        if (dense && !sel.tr[i]) {
          var key = Math.floor(x) * 4096 + s * 64 + d;
          if (seen.has(key)) continue;
          seen.add(key);
        }
        arrow(i, x, s, d, dense);
      }
      ctx.setLineDash([]); ctx.lineWidth = 1; ctx.globalAlpha = 1;
    }
    function arrow(i, x, s, d, dense) {
      var y1 = laneMid(s), y2 = laneMid(d), f = R.flags[i], color = T_COLORS[R.kind[i]] || '#888';
      if (s === d) { y1 -= 8; y2 += 8; }
      var hl = sel.tr[i];
      ctx.globalAlpha = dense && !hl ? 0.5 : 1;
      ctx.strokeStyle = hl ? '#f0b400' : color; ctx.fillStyle = ctx.strokeStyle;
      ctx.lineWidth = hl ? 4 : (f & 2 ? 3 : 1.5);
      ctx.setLineDash(f & 1 && !hl ? [4, 3] : []);
      ctx.beginPath(); ctx.moveTo(x, y1); ctx.lineTo(x, y2); ctx.stroke();
      if (!dense || hl) {
        var dir = y2 > y1 ? 1 : -1;
        ctx.setLineDash([]);
        ctx.beginPath(); ctx.moveTo(x, y2); ctx.lineTo(x - 4, y2 - 7 * dir); ctx.lineTo(x + 4, y2 - 7 * dir); ctx.closePath(); ctx.fill();
        if (f & 2) { ctx.beginPath(); ctx.arc(x, y1, 3, 0, 6.3); ctx.fill(); }
      }
    }
    function drawCompiles() {
      ctx.fillStyle = '#c53030';
      for (var i = 0; i < compTs.length; i++) {
        var t = compTs[i];
        if (t < view.v0 || t > view.v1) continue;
        var x = X(t), y = laneY(0) + 6;
        ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x + 4, y + 5); ctx.lineTo(x, y + 10); ctx.lineTo(x - 4, y + 5); ctx.closePath(); ctx.fill();
      }
    }

    function siteText(s) { var st = TL.sites[s]; return st && st[0] ? st[0] + ':' + st[1] + ' (' + st[2] + ')' : 'site unknown'; }
    function hit(mx, my) {
      var t = T(mx), tol = 5 * (view.v1 - view.v0) / (W() - LABEL_W);
      if (my < TOP && my >= 14 && nSteps) {
        for (var s = 0; s < nSteps; s++) if (stepStart[s] <= t && t <= stepEnd[s]) {
          return [(TL.steps.labels[s] || 'step ' + (s + 1)) + (s < TL.steps.warmup ? ' (warm-up)' : ''),
            fmtNs(stepStart[s]) + ' \u2013 ' + fmtNs(stepEnd[s]) + ' (' + fmtNs(stepEnd[s] - stepStart[s]) + ')'];
        }
        return null;
      }
      var lane = Math.floor((my - TOP) / LANE_H);
      if (lane < 0 || lane >= nl || mx < LABEL_W) return null;
      var best = -1, bestDx = tol + 1;
      for (var p = lowerBound(trOrder, R.ts, t - tol); p < trOrder.length && R.ts[trOrder[p]] <= t + tol; p++) {
        var i = trOrder[p], y1 = laneMid(R.src[i]), y2 = laneMid(R.dst[i]);
        if (my < Math.min(y1, y2) - 8 || my > Math.max(y1, y2) + 8) continue;
        var dx = Math.abs(R.ts[i] - t);
        if (dx < bestDx) { bestDx = dx; best = i; }
      }
      if (best >= 0) {
        var f = R.flags[best];
        return [TL.tkinds[R.kind[best]] + ' ' + fmtBytes(R.bytes[best]) + '  ' + lanes[R.src[best]] + ' \u2192 ' + lanes[R.dst[best]],
          (f & 1 ? 'implicit' : 'explicit') + (f & 2 ? ', blocking (the host waited)' : ', not blocking'),
          'api: ' + TL.apis[R.api[best]], 'at ' + siteText(R.site[best]), 'time ' + fmtNs(R.ts[best])];
      }
      var ord = laneOps[lane], cand = -1, cdur = Infinity;
      for (p = lowerBound(ord, O.ts, t - laneMax[lane] - tol); p < ord.length && O.ts[ord[p]] <= t + tol; p++) {
        i = ord[p];
        if (O.ts[i] - tol <= t && t <= O.ts[i] + O.dur[i] + tol && O.dur[i] < cdur) { cand = i; cdur = O.dur[i]; }
      }
      if (cand >= 0) {
        var lines = [TL.names[O.name[cand]] + '  (' + TL.kinds[O.kind[cand]] + ' on ' + lanes[lane] + ')',
          'dispatch ' + fmtNs(O.dur[cand]) + ' at ' + fmtNs(O.ts[cand]), 'device time: not recorded',
          'at ' + siteText(O.site[cand])];
        if (TL.placed[O.placed[cand]]) lines.push('placed by ' + TL.placed[O.placed[cand]]);
        if (TL.errors[O.err[cand]]) lines.push('error: ' + TL.errors[O.err[cand]]);
        return lines;
      }
      if (lane === 0) for (i = 0; i < compTs.length; i++) if (Math.abs(compTs[i] - t) <= tol) {
        return ['compile ' + TL.compiles.name[i], TL.compiles.secs[i] + ' s at ' + fmtNs(compTs[i])];
      }
      if (TL.buckets && !inWindow(t)) {
        var b = Math.floor(t / TL.buckets.width), row = (TL.buckets.ops[lane] || []).find(function (r) { return r[0] === b; });
        var moved = [];
        TL.buckets.routes.forEach(function (r) {
          if (r[0] !== lane && r[1] !== lane) return;
          var x = r[3].find(function (q) { return q[0] === b; });
          if (x) moved.push(TL.tkinds[r[2]] + ' ' + lanes[r[0]] + '\u2192' + lanes[r[1]] + ': ' + x[1] + ' (' + fmtBytes(x[2]) + ')');
        });
        return ['aggregated ' + fmtNs(b * TL.buckets.width) + ' \u2013 ' + fmtNs((b + 1) * TL.buckets.width) + ' on ' + lanes[lane],
          (row ? row[1] + ' ops, dispatch ' + fmtNs(row[2]) : 'no ops')].concat(moved.length ? moved : ['no transfers']);
      }
      return null;
    }

    function select(key, zoom) {
      sel.ops.fill(0); sel.tr.fill(0); sel.key = key; sel.count = 0; sel.devices = [];
      var m = key ? TL.moments[key] : null, label = document.getElementById('selection');
      document.querySelectorAll('[data-moment].selected').forEach(function (e) { e.classList.remove('selected'); });
      if (m) {
        var oi = unpack(m.ops), ti = unpack(m.tr), lo = Infinity, hi = -Infinity;
        oi.forEach(function (i) { sel.ops[i] = 1; lo = Math.min(lo, O.ts[i]); hi = Math.max(hi, O.ts[i] + O.dur[i]); });
        ti.forEach(function (i) { sel.tr[i] = 1; lo = Math.min(lo, R.ts[i]); hi = Math.max(hi, R.ts[i]); });
        sel.count = oi.length + ti.length; sel.devices = m.devices || [];
        var el = document.querySelector('[data-moment="' + key + '"]');
        if (el) el.classList.add('selected');
        label.textContent = sel.count + ' of ' + m.total + ' moments selected: ' + m.label +
          (sel.count < m.total ? ' (the others are in the aggregated part)' : '');
        if (zoom && sel.count) {
          var pad = Math.max((hi - lo) * 0.08, 2000);
          setView(Math.max(0, lo - pad), Math.min(span, hi + pad));  // never past the run's ends
        }
      } else label.textContent = '';
      box.dataset.selected = String(sel.count);
      box.dataset.selectedKey = key || '';
      api.selected = sel.count;
      draw();
    }
    api.select = select;

    document.querySelectorAll('[data-moment]').forEach(function (el) {
      var key = el.getAttribute('data-moment');
      el.addEventListener('mouseenter', function () { select(key, false); });
      el.addEventListener('mouseleave', function () { select(pinned, false); });
      el.addEventListener('focus', function () { select(key, false); });
      function pin() { pinned = key; select(key, true); box.scrollIntoView({ block: 'nearest' }); }
      el.addEventListener('click', pin);
      el.addEventListener('keydown', function (e) { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); pin(); } });
    });
    function zoomAt(t, factor) {
      var r = (view.v1 - view.v0) * factor, f = (t - view.v0) / (view.v1 - view.v0);
      r = Math.max(200, Math.min(r, span));
      setView(t - f * r, t - f * r + r);
      draw();
    }
    canvas.addEventListener('wheel', function (e) {
      e.preventDefault();
      var rect = canvas.getBoundingClientRect();
      zoomAt(T(e.clientX - rect.left), Math.exp(e.deltaY * 0.002));
    }, { passive: false });
    var drag = null;
    canvas.addEventListener('mousedown', function (e) { drag = { x: e.clientX, v0: view.v0, v1: view.v1 }; canvas.style.cursor = 'grabbing'; });
    window.addEventListener('mouseup', function () { drag = null; canvas.style.cursor = 'grab'; });
    canvas.addEventListener('mousemove', function (e) {
      var rect = canvas.getBoundingClientRect(), mx = e.clientX - rect.left, my = e.clientY - rect.top;
      if (drag) {
        var dt = (e.clientX - drag.x) / (W() - LABEL_W) * (drag.v1 - drag.v0);
        setView(drag.v0 - dt, drag.v1 - dt); tip.hidden = true; draw(); return;
      }
      var lines = hit(mx, my);
      if (lines) showTip(tip, box, lines, mx, my); else tip.hidden = true;
    });
    canvas.addEventListener('mouseleave', function () { tip.hidden = true; });
    canvas.addEventListener('dblclick', function (e) { zoomAt(T(e.clientX - canvas.getBoundingClientRect().left), 0.5); });
    document.getElementById('zoom-in').addEventListener('click', function () { zoomAt((view.v0 + view.v1) / 2, 0.5); });
    document.getElementById('zoom-out').addEventListener('click', function () { zoomAt((view.v0 + view.v1) / 2, 2); });
    document.getElementById('zoom-reset').addEventListener('click', function () { setView(0, span); draw(); });
    document.getElementById('zoom-steady').addEventListener('click', function () { setView(TL.steady[0], TL.steady[1]); draw(); });
    document.getElementById('clear-selection').addEventListener('click', function () { pinned = null; select(null, false); });
    window.addEventListener('resize', draw);
    api.zoomTo = function (a, b) { setView(a, b); draw(); };
    api.ticks = function () { return lastTicks.slice(); };
    api.onView = function (fn) { viewListeners.push(fn); fn(view.v0, view.v1, W(), LABEL_W); };
    api.labelled = function () { return labelled; };
    api.stepTimes = function (i) { return i < nSteps ? [stepStart[i], stepEnd[i]] : null; };
    draw();
  }

  function memoryChart(M) {
    // the server's SVG, kept on the timeline's visible range (same label column, same width)
    var svg = document.getElementById('memory-chart'), panel = document.getElementById('memory-holders');
    if (!svg || !panel) return;
    var NS = 'http://www.w3.org/2000/svg', HGT = 240, PB = 22, PT = 12, series = [], top = 1;
    var lines = {};
    svg.querySelectorAll('.mem-series').forEach(function (el) { lines[el.getAttribute('data-device')] = el; });
    var peaks = {};
    svg.querySelectorAll('.mem-peak').forEach(function (el) { peaks[el.getAttribute('data-device')] = el; });
    M.forEach(function (m) {
      var s = { m: m, t: unpack(m.t), b: unpack(m.bytes) };
      for (var i = 0; i < s.b.length; i++) top = Math.max(top, s.b[i]);
      series.push(s);
    });
    var cur = { v0: 0, v1: 1, w: 900, lw: 96 };
    function X(t) { return cur.lw + (t - cur.v0) / (cur.v1 - cur.v0) * (cur.w - cur.lw); }
    function Y(b) { return HGT - PB - (HGT - PB - PT) * b / top; }
    function redraw(v0, v1, w, lw) {
      cur = { v0: v0, v1: v1, w: w, lw: lw };
      svg.setAttribute('viewBox', '0 0 ' + w + ' ' + HGT); svg.setAttribute('width', String(w));
      var clip = document.getElementById('mem-clip-rect');
      if (clip) { clip.setAttribute('x', String(lw)); clip.setAttribute('width', String(w - lw)); }
      svg.querySelectorAll('line, text').forEach(function (el) { // the axis: stretched to the width
        if (el.id === 'mem-cursor') return;
        if (el.getAttribute('x2') !== null && +el.getAttribute('x2') > lw + 1) el.setAttribute('x2', String(w - 8));
        if (el.tagName === 'text' && +el.getAttribute('x') > lw + 1) el.setAttribute('x', String(w - 8));
      });
      series.forEach(function (s) {
        var el = lines[s.m.device];
        if (!el) return;
        var pts = [X(0).toFixed(1) + ',' + Y(0).toFixed(1)], prev = 0;
        for (var i = 0; i < s.t.length; i++) {
          var x = X(s.t[i]).toFixed(1);
          pts.push(x + ',' + Y(prev).toFixed(1), x + ',' + Y(s.b[i]).toFixed(1));
          prev = s.b[i];
        }
        pts.push(X(TL.span).toFixed(1) + ',' + Y(prev).toFixed(1));
        el.setAttribute('points', pts.join(' '));
        var pk = peaks[s.m.device];
        if (pk && pk.getAttribute('data-t-ns')) {
          var px = X(+pk.getAttribute('data-t-ns'));
          pk.setAttribute('cx', px.toFixed(1));
          pk.setAttribute('visibility', px < lw || px > w ? 'hidden' : 'visible');
        }
      });
    }
    function holdersAt(t) {
      while (panel.firstChild) panel.removeChild(panel.firstChild);
      panel.setAttribute('data-t-ns', String(Math.round(t)));
      var head = document.createElement('b');
      head.textContent = 'held at ' + fmtNs(t) + ':';
      panel.appendChild(head);
      series.forEach(function (s) {
        var st = s.m.snap_t, k = -1;
        for (var i = 0; i < st.length && st[i] <= t; i++) k = i;
        var li = document.createElement('div');
        li.className = 'mem-holders';
        li.setAttribute('data-device', s.m.device);
        var live = 0;
        for (i = 0; i < s.t.length && s.t[i] <= t; i++) live = s.b[i];
        var rows = k >= 0 ? s.m.snaps[k] : [];
        li.textContent = s.m.device + ': ' + fmtBytes(live) + ' live' + (rows.length ? ' \u2014 ' : '') +
          rows.map(function (r) { return r[0] + ' ' + fmtBytes(r[1]) + ' (' + r[2] + (r[2] === 1 ? ' array)' : ' arrays)'); }).join('; ');
        panel.appendChild(li);
      });
    }
    svg.addEventListener('click', function (e) {
      var rect = svg.getBoundingClientRect(), x = (e.clientX - rect.left) * cur.w / rect.width;
      if (x < cur.lw) return;
      var t = cur.v0 + (x - cur.lw) / (cur.w - cur.lw) * (cur.v1 - cur.v0), c = document.getElementById('mem-cursor');
      if (c) { c.setAttribute('x1', x.toFixed(1)); c.setAttribute('x2', x.toFixed(1)); c.setAttribute('visibility', 'visible'); }
      holdersAt(t);
    });
    api.memoryHoldersAt = holdersAt;
    api.onView(redraw);
  }

  function stepChart(S) {
    var canvas = document.getElementById('steps-canvas');
    if (!canvas || !S) return;
    var box = document.getElementById('steps-box'), tip = document.getElementById('steps-tip');
    var ctx = canvas.getContext('2d'), kinds = S.kinds, n = 0, mode = 'bytes';
    kinds.forEach(function (k) { n = Math.max(n, (S.counts[k] || []).length); });
    var PAD_L = 70, PAD_B = 18, HGT = 180;
    function total() { var s = 0; kinds.forEach(function (k) { (S.counts[k] || []).forEach(function (v) { s += v; }); }); return s; }
    function value(k, i) { return ((mode === 'bytes' ? S.bytes : S.counts)[k] || [])[i] || 0; }
    function draw() {
      var w = Math.max(200, box.clientWidth), dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(w * dpr); canvas.height = Math.round(HGT * dpr);
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, w, HGT);
      var max = 1;
      for (var i = 0; i < n; i++) { var s = 0; kinds.forEach(function (k) { s += value(k, i); }); max = Math.max(max, s); }
      var pw = w - PAD_L - 6, bw = pw / Math.max(1, n), ph = HGT - PAD_B - 8;
      ctx.font = '11px system-ui, sans-serif'; ctx.fillStyle = '#5d6675'; ctx.textBaseline = 'middle';
      if (max === 1 && !total()) {
        ctx.fillText('no transfer of at least the audit\'s minimum size in any step', PAD_L, ph / 2);
        return;
      }
      ctx.fillText(mode === 'bytes' ? fmtBytes(max) : String(max), 4, 10);
      ctx.fillText('0', 4, ph + 8);
      ctx.fillText('step \u2192  (' + n + ')', PAD_L, HGT - 8);
      var lastPx = -1;
      for (i = 0; i < n; i++) {
        var x = PAD_L + i * bw;
        if (bw < 1 && Math.floor(x) === lastPx) continue;
        lastPx = Math.floor(x);
        var y = ph + 8;
        kinds.forEach(function (k, ki) {
          var v = value(k, i), h = v / max * ph;
          if (!v) return;
          ctx.fillStyle = i < S.warmup ? '#c9ccd3' : T_COLORS[ki];
          ctx.fillRect(x, y - h, Math.max(1, bw - (bw > 3 ? 1 : 0)), h);
          y -= h;
        });
      }
    }
    function stepAt(mx) { var w = Math.max(200, box.clientWidth), i = Math.floor((mx - PAD_L) / ((w - PAD_L - 6) / Math.max(1, n))); return i >= 0 && i < n ? i : -1; }
    canvas.addEventListener('mousemove', function (e) {
      var rect = canvas.getBoundingClientRect(), i = stepAt(e.clientX - rect.left);
      if (i < 0) { tip.hidden = true; return; }
      var lines = ['step ' + (S.numbers && S.numbers[i] != null ? S.numbers[i] : i + 1) + (i < S.warmup ? ' (warm-up)' : '')];
      kinds.forEach(function (k) { lines.push(k + ': ' + ((S.counts[k] || [])[i] || 0) + ' (' + fmtBytes((S.bytes[k] || [])[i] || 0) + ')'); });
      showTip(tip, box, lines, e.clientX - rect.left, e.clientY - rect.top);
    });
    canvas.addEventListener('mouseleave', function () { tip.hidden = true; });
    canvas.addEventListener('click', function (e) {
      var i = stepAt(e.clientX - canvas.getBoundingClientRect().left), t = api.stepTimes ? api.stepTimes(i) : null;
      if (t) { api.zoomTo(t[0] - (t[1] - t[0]) * 0.05, t[1] + (t[1] - t[0]) * 0.05); document.getElementById('timeline').scrollIntoView(); }
    });
    document.querySelectorAll('input[name=stepmode]').forEach(function (r) {
      r.addEventListener('change', function () { mode = r.value; draw(); });
    });
    window.addEventListener('resize', draw);
    draw();
  }
})();
