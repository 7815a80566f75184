/*! Queue Manager tag 1.5.0 - see docs/INTEGRATION.md. Fails open: if the queue cannot answer, the page shows. */
(function () {
  'use strict';
  var W = window, D = document, hideEl = null, failsafe = null, mem = {}, invite = null;

  function reveal() {
    clearTimeout(failsafe);
    try { if (hideEl && hideEl.parentNode) hideEl.parentNode.removeChild(hideEl); } catch (e) {}
    hideEl = null;
  }
  // localStorage on this (the customer's) origin; memory when storage is blocked.
  function get(k) { try { var v = W.localStorage.getItem(k); if (v) return v; } catch (e) {} return mem[k] || null; }
  function set(k, v) { mem[k] = v; try { W.localStorage.setItem(k, v); } catch (e) {} }
  function enc(v) { return encodeURIComponent(v); }
  function dec(v) { try { return decodeURIComponent(v.replace(/\+/g, ' ')); } catch (e) { return v; } }
  function go(u) { try { W.location.replace(u); } catch (e) { reveal(); } }
  // An invitation (a qm_token that is a JWS: three base64url parts) goes on to the waiting page, which joins with it.
  function invited(u, invite) { return invite ? u + (u.indexOf('?') < 0 ? '?' : '&') + 'qm_token=' + enc(invite) : u; }

  // Take qm_token out of an href; every other parameter and the hash stay byte for byte.
  function split(href) {
    var h = href.indexOf('#'), hash = h < 0 ? '' : href.slice(h), rest = h < 0 ? href : href.slice(0, h);
    var q = rest.indexOf('?'), keep = [], token = null, had = false;
    if (q < 0) return { url: href, token: null, had: false };
    rest.slice(q + 1).split('&').forEach(function (p) {
      var i = p.indexOf('=');
      if (dec(i < 0 ? p : p.slice(0, i)) !== 'qm_token') { keep.push(p); return; }
      had = true;
      token = (i < 0 ? '' : dec(p.slice(i + 1))) || token;
    });
    return { url: rest.slice(0, q) + (keep.length ? '?' + keep.join('&') : '') + hash, token: token, had: had };
  }

  try {
    var script = D.currentScript || D.querySelector('script[data-room][src*="qm.js"]');
    var room = script && script.getAttribute('data-room');
    var base = script ? new URL(script.src, D.baseURI).origin : '';
  } catch (e) {}

  function check() {
    return new Promise(function (resolve) {
      var done = false, timer = null, ctrl = null;
      function end(r) { if (done) return false; done = true; clearTimeout(timer); resolve(r); return true; }
      function failOpen(why) {
        if (!end({ admit: null, failOpen: why })) return;
        reveal();
        try { console.warn('[qm] failing open: ' + why); } catch (e) {}
      }
      try {
        if (!room || !base) return failOpen('no data-room or src');
        var s = split(W.location.href), page = s.url, token = s.token;
        if (s.had) { try { W.history.replaceState(W.history.state, '', page); } catch (e) {} }
        // kept for every check of this page: the first one took it out of the address bar
        if (token && /^eyJ[\w-]*\.[\w-]+\.[\w-]+$/.test(token)) { invite = token; token = null; }
        if (token) set('qm_' + room, token); else token = get('qm_' + room);
        var dk = get('qm_dk_' + room);
        var url = base + '/api/check?roomId=' + enc(room) + '&url=' + enc(page) +
          (token ? '&qm_token=' + enc(token) : '') + (dk ? '&dk=' + enc(dk) : '');
        if (typeof AbortController === 'function') ctrl = new AbortController();
        timer = setTimeout(function () { failOpen('timeout'); if (ctrl) ctrl.abort(); }, 2000);
        W.fetch(url, { credentials: 'include', cache: 'no-store', signal: ctrl ? ctrl.signal : undefined })
          .then(function (res) {
            if (done) return;
            // 429: the queue is up and shedding load. Wait in line; this is not a fail-open.
            if (res.status === 429) {
              if (end({ admit: false, reason: 'rate_limited' })) go(invited(base + '/w/' + enc(room) + '?qm_return=' + enc(page), invite));
              return;
            }
            if (res.status !== 200) return failOpen('http-' + res.status);
            return res.json().then(function (j) {
              if (j && j.admit === true) {
                if (typeof j.doorKey === 'string' && j.doorKey) set('qm_dk_' + room, j.doorKey);
                if (end({ admit: true, state: j.state })) reveal();
              } else if (j && j.admit === false && typeof j.waitUrl === 'string' && /^https?:\/\//i.test(j.waitUrl)) {
                if (end({ admit: false, reason: j.reason })) go(invited(j.waitUrl, invite));
              } else {
                failOpen('invalid-response');
              }
            }, function () { failOpen('invalid-response'); });
          })
          .catch(function () { failOpen('unreachable'); });
      } catch (e) {
        failOpen('error');
      }
    });
  }

  try {
    if (script && script.getAttribute('data-hide') === '1') {
      hideEl = D.createElement('style');
      hideEl.textContent = 'html{visibility:hidden!important}';
      (D.head || D.documentElement).appendChild(hideEl);
      failsafe = setTimeout(reveal, 2500);
    }
    W.QM = { version: '1.5.0', check: check };
    check();
  } catch (e) {
    reveal();
  }
})();
