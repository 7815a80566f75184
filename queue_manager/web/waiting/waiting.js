/* Queue Manager waiting page. Served at /assets/waiting-<hash>.js after `var QM_STRINGS = {…};` (web/i18n/<tag>.json). */
(function () {
  'use strict';

  var STRINGS = (typeof QM_STRINGS === 'object' && QM_STRINGS) ? QM_STRINGS : { en: {} };
  var cfg = {};
  try { cfg = JSON.parse(document.getElementById('qm-config').textContent) || {}; } catch (e) { cfg = {}; }
  var roomId = typeof cfg.roomId === 'string' ? cfg.roomId : '';
  var apiBase = typeof cfg.apiBase === 'string' ? cfg.apiBase.replace(/\/+$/, '') : '';
  var roomName = typeof cfg.name === 'string' && cfg.name ? cfg.name : roomId;
  var lang = STRINGS[document.documentElement.lang] ? document.documentElement.lang : 'en';
  // the languages this room offers (its `languages`, else all); a remembered choice outside them is left alone
  var OFFERED = Array.isArray(cfg.languages) && cfg.languages.length ? cfg.languages : Object.keys(STRINGS);
  var RTL = (typeof QM_RTL === 'object' && QM_RTL) ? QM_RTL : [];
  function offered(v) { return !!STRINGS[v] && OFFERED.indexOf(v) >= 0; }
  // a preview link's page: the server's synthetic answer is shown and nothing is asked of the server
  var preview = cfg.preview && typeof cfg.preview === 'object' ? cfg.preview : null;

  var POLL_MS = 5000;
  var BACKOFF_MIN = 2000;
  var BACKOFF_MAX = 20000;
  var REASONS = ['ejected', 'expired', 'purged', 'flushed', 'revoked', 'previous_generation', 'not_owner'];

  var $ = function (id) { return document.getElementById(id); };

  // ---- language ----
  function t(key, vars) {
    var table = STRINGS[lang] || STRINGS.en;
    var s = table[key];
    if (typeof s !== 'string') s = STRINGS.en[key];
    if (typeof s !== 'string') s = key;
    if (vars) s = s.replace(/\{(\w+)\}/g, function (m, k) { return vars[k] !== undefined ? String(vars[k]) : m; });
    return s;
  }

  function cookieLang() {
    var m = document.cookie.match(/(?:^|;\s*)qm_lang=([^;]*)/);
    return m ? decodeURIComponent(m[1]) : null;
  }

  function storedLang() {
    try { return window.localStorage.getItem('qm_lang'); } catch (e) { return null; }
  }

  function persistLang(v) {
    var secure = location.protocol === 'https:' ? '; secure' : '';
    document.cookie = 'qm_lang=' + encodeURIComponent(v) + '; path=/; max-age=31536000; samesite=lax' + secure;
    try { window.localStorage.setItem('qm_lang', v); } catch (e) { /* private mode */ }
  }

  function setLang(v) {
    if (!offered(v)) return;
    lang = v;
    document.documentElement.lang = v;
    document.documentElement.dir = RTL.indexOf(v) >= 0 ? 'rtl' : 'ltr';
    var nodes = document.querySelectorAll('[data-i18n]');
    for (var i = 0; i < nodes.length; i++) nodes[i].textContent = t(nodes[i].getAttribute('data-i18n'));
    var sel = $('lang');
    if (sel && sel.value !== v) sel.value = v;
    var note = $('brand-message');
    if (note) {
      var notes = (cfg.brandMessage && typeof cfg.brandMessage === 'object') ? cfg.brandMessage : {};
      var text = notes[v] || notes.en || '';
      note.textContent = text;
      note.hidden = !text;
    }
    headlineKey = null;
    noticeKey = null;
    if (closed) showClosed(); else if (last) render(last); else if (full) showFull(); else setTitle(null);
    setConn(connMode);
    if (problemKey) setProblem(problemKey);
    if (mailMsg) setMailStatus(mailMsg.key, mailMsg.vars, mailMsg.cls);
    if (codeMsgKey) setText('code-status', t(codeMsgKey));
  }

  // ---- state (memory only: the cookies carry the place across reloads) ----
  var token = null;
  var last = null;          // last payload applied
  var offset = 0;           // server clock minus local clock, ms (from the payload's `now`)
  var es = null;            // EventSource
  var streamTimer = null;
  var streamDelay = BACKOFF_MIN;
  var lastRefresh = 0;
  var polling = false;
  var pollTimer = null;
  var pollDelay = BACKOFF_MIN;
  var joining = false;
  var joinTimer = null;
  var joinDelay = BACKOFF_MIN;
  var rejoinedForExpiry = false;
  var finished = false;     // redirected, or the room does not exist
  var stickyReason = null;
  var placeKey = null;
  var startPos = 0;
  var countdownTimer = null;
  var countdownPolled = false;
  var connMode = 'connecting';
  var problemKey = null;
  var full = false;         // the last join was refused because the line is full (it keeps trying)
  var closed = cfg.closed === true;  // the room is closed (queueing reject): the closed page, no place
  var headlineKey = null;
  var noticeKey = null;

  // An invitation token (?qm_token=<JWS>: three base64url parts, a JSON header) that brought the visitor here: kept in
  // memory for the first join, and taken out of the address bar at once (history, bookmarks, a shared link).
  // A qm_token of two parts is a pass the page never reads.
  var invite = (function () {
    try {
      var params = new URLSearchParams(location.search);
      var v = params.get('qm_token');
      if (!v || !/^eyJ[\w-]*\.[\w-]+\.[\w-]+$/.test(v)) return null;
      params.delete('qm_token');
      var rest = params.toString();
      history.replaceState(history.state, '', location.pathname + (rest ? '?' + rest : '') + location.hash);
      return v;
    } catch (e) { return null; }
  })();
  var entryCode = null;      // the code the visitor typed, sent with the next join
  var INVITE_REFUSALS = {
    token_required: 'inviteRequired', token_invalid: 'inviteInvalid', token_expired: 'inviteExpired',
    token_used: 'inviteUsed', token_wrong_room: 'inviteWrongRoom', token_ip_mismatch: 'inviteIpMismatch',
    unknown_lane: 'inviteInvalid'  // the invitation (or code) names a lane the room does not have: the site's to fix
  };
  var CODE_REFUSALS = { code_invalid: 'codeInvalid', code_used_up: 'codeUsedUp', code_rate_limited: 'codeRateLimited' };

  function returnUrl() {
    try {
      var v = new URLSearchParams(location.search).get('qm_return');
      return v ? v : null;
    } catch (e) { return null; }
  }

  function api(path) { return apiBase + path; }
  // One request to this server's visitor API: same-origin credentials, never cached, JSON answers.
  function call(method, path, body) {
    var init = { method: method, credentials: 'same-origin', cache: 'no-store', headers: { 'Accept': 'application/json' } };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return fetch(api(path), init);
  }

  function num(n) {
    try { return Number(n).toLocaleString(lang); } catch (e) { return String(n); }
  }

  function formatEta(sec) {
    if (sec === null || sec === undefined || typeof sec !== 'number' || !isFinite(sec)) return t('etaNone');
    var s = Math.max(0, Math.round(sec));
    if (s < 55) return t('etaSec', { n: num(Math.max(5, Math.round(s / 5) * 5)) });
    var mins = Math.max(1, Math.round(s / 60));
    if (mins < 60) return t('etaMin', { n: num(mins) });
    var h = Math.floor(mins / 60);
    var m = mins % 60;
    return m ? t('etaHour', { h: num(h), m: num(m) }) : t('etaHourOnly', { h: num(h) });
  }

  function pad(n) { return n < 10 ? '0' + n : String(n); }

  function formatCountdown(ms) {
    var s = Math.max(0, Math.ceil(ms / 1000));
    var d = Math.floor(s / 86400);
    var h = Math.floor((s % 86400) / 3600);
    var m = Math.floor((s % 3600) / 60);
    var clock = pad(h) + ':' + pad(m) + ':' + pad(s % 60);
    return d > 0 ? t('days', { n: num(d) }) + ' ' + clock : clock;
  }

  function clockTime(serverMs) {
    var local = new Date(serverMs - offset);
    try { return local.toLocaleTimeString(lang, { hour: 'numeric', minute: '2-digit' }); }
    catch (e) { return local.toTimeString().slice(0, 5); }
  }

  function show(id, on) { var el = $(id); if (el) el.hidden = !on; }
  function setText(id, text) { var el = $(id); if (el && el.textContent !== text) el.textContent = text; }

  function setTitle(prefix) {
    var base = roomName + ' \u00b7 ' + t('titleSuffix');
    document.title = prefix ? prefix + ' \u00b7 ' + base : base;
  }

  function setConn(mode) {
    connMode = mode;
    var el = $('conn');
    if (!el) return;
    el.className = 'conn' + (mode === 'live' ? ' live' : '');
    setText('conn-text',
      mode === 'live' ? t('connLive') :
      mode === 'poll' ? t('connPoll') :
      mode === 'retry' ? t('connRetry') :
      mode === 'full' ? t('connFull') :
      mode === 'closed' ? t('titleClosed') :
      mode === 'done' ? t('connDone') : t('connecting'));
  }

  function setProblem(key) {
    problemKey = key;
    var el = $('problem');
    if (!el) return;
    if (key) { setText('problem', t(key)); el.hidden = false; }
    else { el.hidden = true; el.textContent = ''; }
  }

  function setHeadline(pre, big, post, solo) {
    var key = lang + '|' + pre + '|' + (big === null ? '' : big) + '|' + post;
    if (headlineKey === key) return;
    headlineKey = key;
    var el = $('headline');
    el.className = 'headline' + (solo ? ' solo' : '');
    el.textContent = '';
    var add = function (cls, text) {
      if (!text) return;
      var s = document.createElement('span');
      s.className = cls;
      s.textContent = text;
      el.appendChild(s);
      el.appendChild(document.createTextNode(' '));
    };
    add('pre', pre);
    add('num', big);
    add('post', post);
  }

  function renderNotice(p) {
    var el = $('notice');
    var lines = [];
    if (stickyReason) lines.push(t('reason_' + stickyReason));
    var paused = p.roomState === 'paused' && (p.state === 'waiting' || p.state === 'scheduled');
    if (paused) lines.push(t('paused'));
    var key = lang + '|' + lines.join('|') + '|' + paused;
    if (noticeKey === key) return;
    noticeKey = key;
    el.textContent = '';
    lines.forEach(function (text) {
      var para = document.createElement('p');
      para.textContent = text;
      el.appendChild(para);
    });
    el.className = 'notice' + (paused ? ' has-paused' : '');
    el.hidden = lines.length === 0;
  }

  function renderRef(p) {
    var hasRef = typeof p.ref === 'string' && p.ref !== '';
    var hasTicket = typeof p.ticket === 'number';
    if (hasRef || hasTicket) {
      setText('ref', hasRef ? p.ref : '–');
      setText('ticket', hasTicket ? String(p.ticket) : '');
      show('ticket-part', hasTicket);
      show('ref-line', true);
      show('ref-help', hasRef);
    }
  }

  function renderProgress(p) {
    var key = String(p.ref) + '#' + String(p.ticket);
    if (key !== placeKey) { placeKey = key; startPos = 0; }
    var pos = typeof p.position === 'number' ? p.position : null;
    var pct = 0;
    if (pos !== null && pos > 0) {
      if (pos > startPos) startPos = pos;
      // how far this place has come since the page first saw it; "next" is nearly there
      pct = pos === 1 ? 96 : Math.round(Math.min(0.96, Math.max(0.04, (startPos - pos) / startPos)) * 100);
    }
    $('bar-fill').style.width = pct + '%';
    var bar = $('bar');
    bar.setAttribute('aria-valuenow', String(pct));
    bar.className = 'bar' + (p.roomState === 'paused' ? ' paused' : '');
  }

  function tickCountdown() {
    if (!last || last.state !== 'scheduled' || typeof last.opensAt !== 'number') return;
    var left = last.opensAt - (Date.now() + offset);   // against the server's clock, never the device's
    if (left > 0) {
      setText('countdown', formatCountdown(left));
    } else {
      setText('countdown', formatCountdown(0));
      setText('precount', t('opening'));
      if (!countdownPolled) { countdownPolled = true; setTimeout(pollOnceQuietly, 1500); }
    }
  }

  function setView(which) {
    show('v-wait', which === 'wait');
    show('v-sched', which === 'sched');
    show('v-turn', which === 'turn');
  }

  // the drop's published commitment and the visitor's own handle, to check the draw with afterwards
  function renderDrawProof(p) {
    var commitment = typeof p.drawCommitment === 'string' ? p.drawCommitment : '';
    show('draw-proof', commitment !== '');
    setText('draw-commitment', commitment);
    var handle = typeof p.handle === 'string' ? p.handle : '';
    show('draw-handle-line', handle !== '');
    setText('draw-handle', handle);
  }

  // a random line: how many wait, the likely wait as a range (p25–p75) and the odds of the next minute in words
  function renderRandom(p) {
    setHeadline(t('randomHead'), null, '', true);
    setTitle(null);
    var label = $('ahead-label');
    if (label) { label.setAttribute('data-i18n', 'waitingLabel'); label.textContent = t('waitingLabel'); }
    setText('ahead', typeof p.waiting === 'number' ? num(p.waiting) : '–');
    var lo = p.etaLowSec, hi = p.etaHighSec;
    setText('eta', typeof lo === 'number' && typeof hi === 'number'
      ? (formatEta(lo) === formatEta(hi) ? formatEta(lo) : t('etaRange', { lo: formatEta(lo), hi: formatEta(hi) }))
      : t('etaNone'));
    var odds = p.nextMinuteOdds;
    setText('odds', typeof odds !== 'number' ? '' : odds >= 100 ? t('oddsSure') : odds < 1 ? t('oddsLow') : t('oddsPct', { n: num(odds) }));
    show('odds', typeof odds === 'number');
    show('random-explain', true);
    show('bar', false);
  }

  function renderFifoLabels() {
    var label = $('ahead-label');
    if (label && label.getAttribute('data-i18n') !== 'aheadLabel') {
      label.setAttribute('data-i18n', 'aheadLabel');
      label.textContent = t('aheadLabel');
    }
    show('odds', false);
    show('random-explain', false);
    show('bar', true);
  }

  function render(p) {
    if (p.queueing === 'reject' && p.state !== 'passed' && p.state !== 'admitted' && p.state !== 'bypass') {
      showClosed();
      return;
    }
    showClosedBody(false);
    renderNotice(p);
    renderRef(p);
    renderMail(p);
    if (p.state !== 'scheduled' && countdownTimer) { clearInterval(countdownTimer); countdownTimer = null; }

    if (p.state === 'scheduled') {
      setView('sched');
      var when = typeof p.opensAt === 'number' ? ' ' + t('opensAt', { t: clockTime(p.opensAt) }) : '';
      setHeadline(t('preHead') + when, null, '', true);
      if (typeof p.preCount === 'number') {
        setText('precount', p.preCount === 1 ? t('preOne') : t('preMany', { n: num(p.preCount) }));
      } else {
        setText('precount', '');
      }
      renderDrawProof(p);
      setTitle(t('titleOpens'));
      tickCountdown();
      if (!countdownTimer) countdownTimer = setInterval(tickCountdown, 1000);
    } else if (p.state === 'waiting' && p.queueing === 'random') {
      setView('wait');
      renderRandom(p);
    } else if (p.state === 'waiting') {
      setView('wait');
      renderFifoLabels();
      if (typeof p.position === 'number') {
        setHeadline(t('posBefore'), num(p.position), t('posAfter'), false);
        setTitle('(' + num(p.position) + ')');
      } else {
        setHeadline(t('inLine'), null, '', true);
        setTitle(null);
      }
      var ahead = typeof p.ahead === 'number' ? p.ahead : null;
      setText('ahead', ahead === null ? '–' : ahead === 0 ? t('aheadNone') : ahead === 1 ? t('aheadOne') : t('aheadMany', { n: num(ahead) }));
      setText('eta', formatEta(p.etaSec));
      renderProgress(p);
    } else if (p.state === 'passed' || p.state === 'admitted' || p.state === 'bypass') {
      setView('turn');
      setHeadline(t('turn'), null, '', true);
      setTitle(t('titleTurn'));
      if (typeof p.passExpiresAt === 'number' && p.state === 'passed') {
        setText('pass-until', t('passUntil', { t: clockTime(p.passExpiresAt) }));
        show('pass-until', true);
      } else {
        show('pass-until', false);
      }
      if (typeof p.redirectUrl === 'string') {
        setText('turn-text', t('turnGoing'));
        $('turn-link').setAttribute('href', p.redirectUrl);
        show('turn-link', true);
      } else {
        setText('turn-text', t('preparing'));
        show('turn-link', false);
      }
    } else if (p.state === 'expired') {
      setView('wait');
      setHeadline(t('expiredHead'), null, '', true);
    }
  }

  function apply(p) {
    if (finished || !p || typeof p !== 'object') return;
    if (typeof p.token === 'string' && p.token) token = p.token;
    if (typeof p.now === 'number') offset = p.now - Date.now();
    if (typeof p.reason === 'string' && REASONS.indexOf(p.reason) >= 0) stickyReason = p.reason;
    if (p.state !== 'expired') rejoinedForExpiry = false;
    if (p.state === 'scheduled' && (!last || last.state !== 'scheduled')) countdownPolled = false;
    last = p;
    full = false;
    showLead(true);
    setProblem(null);
    render(p);

    if ((p.state === 'passed' || p.state === 'admitted' || p.state === 'bypass') && typeof p.redirectUrl === 'string') {
      goTo(p.redirectUrl);
    } else if (p.state === 'expired' && !rejoinedForExpiry) {
      rejoinedForExpiry = true;
      closeStream();
      stopPolling();
      join();
    }
  }

  function goTo(url) {
    if (finished) return;
    // The server built and checked this URL (permitted return origin, qm_token appended); refuse script URLs only.
    if (/^\s*(javascript|data|vbscript):/i.test(url)) return;
    finished = true;
    closeStream();
    stopPolling();
    clearTimeout(joinTimer);
    setConn('done');
    setTimeout(function () { location.replace(url); }, 250);
  }

  function showLead(on) {
    var lead = document.querySelector('p.lead');
    if (lead) lead.hidden = !on;
  }

  // the line is full: no place yet; the page keeps trying at the pace the server asks (Retry-After)
  function showFull() {
    showLead(false);  // "you keep your place" is not true of someone who has none
    setHeadline(t('fullHead'), null, '', true);
    setTitle(t('titleFull'));
    setProblem('fullBody');
  }

  // the room is closed (queueing reject): its message and brand stay, the place (if any) is kept
  function showClosedBody(on) {
    var lead = document.querySelector('p.lead');
    if (!lead) return;
    var key = on ? 'closedBody' : 'lead';
    if (lead.getAttribute('data-i18n') !== key) {
      lead.setAttribute('data-i18n', key);
      lead.textContent = t(key);
    }
    if (on) lead.hidden = false;
  }

  function showClosed() {
    setView(null);
    showClosedBody(true);
    setHeadline(t('closedHead'), null, '', true);
    setTitle(t('titleClosed'));
    setProblem(null);
    show('ref-help', false);
    show('mail', false);
    setConn('closed');
  }

  function fatal(key) {
    finished = true;
    closeStream();
    stopPolling();
    clearTimeout(joinTimer);
    clearTimeout(streamTimer);
    setProblem(key);
    setConn('done');
    if (!last) show('status-card', false);
  }

  function nextBackoff(cur) { return Math.min(cur * 2, BACKOFF_MAX); }

  function retryAfterMs(res, fallbackSec) {
    var v = res && res.headers ? parseInt(res.headers.get('Retry-After'), 10) : NaN;
    return (isFinite(v) && v >= 0 ? v : fallbackSec) * 1000;
  }

  function readJson(res) {
    return res.text().then(function (body) {
      try { return body ? JSON.parse(body) : null; } catch (e) { return null; }
    });
  }

  // ---- join ----
  function join() {
    if (finished || joining) return;
    if (!roomId) { fatal('noRoom'); return; }
    joining = true;
    clearTimeout(joinTimer);
    var body = { roomId: roomId };
    var ret = returnUrl();
    if (ret) body.returnUrl = ret;
    if (invite) body.token = invite;
    if (entryCode) body.code = entryCode;
    call('POST', '/api/join', body).then(function (res) {
      return readJson(res).then(function (data) {
        joining = false;
        handleJoin(res, data);
      });
    }).catch(function () {
      joining = false;
      setConn('retry');
      scheduleJoin(joinDelay);
      joinDelay = nextBackoff(joinDelay);
    });
  }

  function scheduleJoin(ms) {
    if (finished) return;
    clearTimeout(joinTimer);
    joinTimer = setTimeout(join, ms);
  }

  function handleJoin(res, data) {
    if (finished) return;
    var code = data && typeof data.code === 'string' ? data.code : '';
    if (res.ok && data && typeof data === 'object' && typeof data.state === 'string') {
      joinDelay = BACKOFF_MIN;
      invite = null;         // used: the place is the cookie's from now on
      entryCode = null;
      showCodeForm(false);
      apply(data);
      if (!finished) openStream();
      return;
    }
    if (res.status === 404 && code === 'no_room') { fatal('noRoom'); return; }
    if (res.status === 403 && code === 'access_blocked') { fatal('accessBlocked'); return; }  // waiting will not change it
    if (INVITE_REFUSALS[code]) {  // a fresh link is needed: no retry, and no promise of a place
      show('lead', false);
      fatal(INVITE_REFUSALS[code]);
      return;
    }
    if (code === 'code_required' || CODE_REFUSALS[code]) {
      entryCode = null;
      showCodeForm(true, CODE_REFUSALS[code] || null);
      setConn('done');
      return;
    }
    if (res.status === 403 && code === 'room_closed') {  // closed since this page was sent: ask again now and then
      showClosed();
      scheduleJoin(60000);
      return;
    }
    if (res.status === 503 && code === 'queue_full') {
      full = true;
      showFull();
      setConn('full');
      scheduleJoin(retryAfterMs(res, 60));
      return;
    }
    if (res.status === 429) {
      setProblem(code === 'queue_identity_limit' ? 'identityLimit' : 'busy');
      setConn('retry');
      scheduleJoin(retryAfterMs(res, 30));
      return;
    }
    if (res.status < 500) setProblem('joinError');
    setConn('retry');
    scheduleJoin(joinDelay);
    joinDelay = nextBackoff(joinDelay);
  }

  // ---- entry code (a room whose entry is code) ----
  var codeMsgKey = null;
  function showCodeForm(on, errorKey) {
    show('code', on);
    show('status-card', !on);
    codeMsgKey = errorKey || null;
    var status = $('code-status');
    if (status) status.textContent = codeMsgKey ? t(codeMsgKey) : '';
    var input = $('code-input');
    if (input) {
      input.setAttribute('aria-invalid', codeMsgKey ? 'true' : 'false');
      if (on) input.focus();
    }
    var send = $('code-send');
    if (send) send.disabled = false;
  }

  function sendCode(ev) {
    ev.preventDefault();
    var input = $('code-input');
    var v = input ? input.value.trim() : '';
    if (!v) { showCodeForm(true, 'codeInvalid'); return; }
    entryCode = v;
    var send = $('code-send');
    if (send) send.disabled = true;
    join();
  }

  var codeForm = $('code-form');
  if (codeForm) codeForm.addEventListener('submit', sendCode);

  // ---- live stream ----
  function query() {
    var q = 'roomId=' + encodeURIComponent(roomId);
    if (token) q += '&token=' + encodeURIComponent(token);
    return q;
  }

  function closeStream() {
    clearTimeout(streamTimer);
    streamTimer = null;
    if (es) {
      es.onmessage = es.onerror = null;
      try { es.close(); } catch (e) { /* already closed */ }
      es = null;
    }
  }

  function openStream() {
    if (finished) return;
    closeStream();
    if (typeof window.EventSource !== 'function') { startPolling(); return; }
    var s;
    try { s = new EventSource(api('/events?' + query())); } catch (e) { streamFailed(); return; }
    es = s;
    s.onmessage = function (ev) {
      if (s !== es) return;
      var p = null;
      try { p = JSON.parse(ev.data); } catch (e) { return; }
      streamDelay = BACKOFF_MIN;
      stopPolling();
      setConn('live');
      apply(p);
    };
    s.addEventListener('refresh', function () {
      if (s !== es || finished) return;
      // The server ends the stream after this frame: reopen it so the place is re-signed.
      var now = Date.now();
      var wait = now - lastRefresh < BACKOFF_MIN ? BACKOFF_MIN : 0;
      lastRefresh = now;
      closeStream();
      if (wait) streamTimer = setTimeout(openStream, wait); else openStream();
    });
    s.onerror = function () {
      if (s !== es) return;
      streamFailed();
    };
  }

  function streamFailed() {
    // The guide's rule: poll /api/status every 5 s at once; reopen the stream after 2 s, 4 s, … up to 20 s.
    closeStream();
    if (finished) return;
    setConn('retry');
    startPolling();
    streamTimer = setTimeout(openStream, streamDelay);
    streamDelay = nextBackoff(streamDelay);
  }

  // ---- polling fallback ----
  function startPolling() {
    if (polling || finished) return;
    polling = true;
    pollDelay = BACKOFF_MIN;
    poll();
  }

  function stopPolling() {
    polling = false;
    clearTimeout(pollTimer);
    pollTimer = null;
  }

  function schedulePoll(ms) {
    if (!polling || finished) return;
    clearTimeout(pollTimer);
    pollTimer = setTimeout(poll, ms);
  }

  function poll() {
    if (!polling || finished) return;
    fetchStatus().then(function (r) {
      if (!polling || finished) return;
      if (r.ok) {
        pollDelay = BACKOFF_MIN;
        if (!es || es.readyState !== 1) setConn('poll');
        schedulePoll(POLL_MS);
      } else if (r.retryMs) {
        schedulePoll(Math.max(POLL_MS, r.retryMs));
      } else {
        schedulePoll(Math.max(POLL_MS, pollDelay));
        pollDelay = nextBackoff(pollDelay);
      }
    });
  }

  function pollOnceQuietly() {
    if (finished || polling || preview) return;
    fetchStatus();
  }

  // Resolves with {ok, retryMs}; never rejects.
  function fetchStatus() {
    return call('GET', '/api/status?' + query()).then(function (res) {
      return readJson(res).then(function (data) {
        if (finished) return { ok: true };
        var code = data && typeof data.code === 'string' ? data.code : '';
        if (res.ok && data && typeof data.state === 'string') { apply(data); return { ok: true }; }
        if (res.status === 404 && code === 'no_room') { fatal('noRoom'); return { ok: true }; }
        if (res.status === 429) return { ok: false, retryMs: retryAfterMs(res, 30) };
        if (res.status >= 500) { setConn('retry'); return { ok: false }; }
        join();   // any other refusal: the ticket could not be read, so ask for a place again
        return { ok: false };
      });
    }).catch(function () {
      setConn('retry');
      return { ok: false };
    });
  }

  // ---- turn e-mails (only when the server offers them) ----
  var mailOn = cfg.email === true && !preview;
  var mailTicket = null;    // the ticket the section was last set up for
  var mailMsg = null;       // the status line shown: {key, vars, cls}
  var mailBusy = false;

  function setMailStatus(key, vars, cls) {
    mailMsg = key ? { key: key, vars: vars, cls: cls } : null;
    var el = $('mail-status');
    if (!el) return;
    el.className = 'mail-status' + (cls ? ' ' + cls : '');
    el.textContent = key ? t(key, vars) : '';
  }

  function renderMail(p) {
    if (!mailOn) { show('mail', false); return; }
    var offer = p.state === 'waiting' && typeof p.ticket === 'number';
    show('mail', offer);
    if (offer && p.ticket !== mailTicket) {
      mailTicket = p.ticket;      // a new place (first load, or joined again): ask what is kept for it
      setMailStatus(null);
      show('mail-cancel', false);
      readMail();
    }
  }

  function mailSaved(data) {
    setMailStatus('mailSaved', { address: data && typeof data.address === 'string' ? data.address : '' }, 'ok');
    show('mail-cancel', true);
  }

  function readMail() {
    call('GET', '/api/notify?' + query()).then(function (res) {
      return readJson(res).then(function (data) {
        if (res.status === 404) { mailOn = false; show('mail', false); return; }
        if (res.ok && data && data.signedUp === true) mailSaved(data);
      });
    }).catch(function () { /* the form still works */ });
  }

  function mailDone() {
    mailBusy = false;
    var b = $('mail-send');
    if (b) b.disabled = false;
  }

  function sendMail(ev) {
    ev.preventDefault();
    if (mailBusy) return;
    var input = $('mail-address');
    var value = input.value.trim();
    if (!value || !input.checkValidity()) {
      input.setAttribute('aria-invalid', 'true');
      setMailStatus('mailInvalid', null, 'bad');
      input.focus();
      return;
    }
    input.removeAttribute('aria-invalid');
    mailBusy = true;
    $('mail-send').disabled = true;
    setMailStatus('mailSaving', null, '');
    var body = { roomId: roomId, email: value, lang: lang };
    if (token) body.token = token;
    call('POST', '/api/notify', body).then(function (res) {
      return readJson(res).then(function (data) {
        mailDone();
        var code = data && typeof data.code === 'string' ? data.code : '';
        if (res.ok) { input.value = ''; mailSaved(data); return; }
        if (res.status === 400 && code === 'invalid_email') {
          input.setAttribute('aria-invalid', 'true');
          setMailStatus('mailInvalid', null, 'bad');
          input.focus();
        } else if (res.status === 429) {
          setMailStatus('mailLimit', null, 'bad');
        } else if (res.status === 409) {
          setMailStatus('mailNotInLine', null, 'bad');
        } else if (res.status === 404 && code === 'email_notify_off') {
          mailOn = false;
          show('mail', false);
        } else {
          setMailStatus('mailFailed', null, 'bad');
        }
      });
    }).catch(function () {
      mailDone();
      setMailStatus('mailFailed', null, 'bad');
    });
  }

  function cancelMail() {
    if (mailBusy) return;
    mailBusy = true;
    call('DELETE', '/api/notify?' + query()).then(function (res) {
      mailBusy = false;
      if (res.ok) {
        show('mail-cancel', false);
        setMailStatus('mailCancelled', null, '');
        var input = $('mail-address');
        if (input) input.focus();
      } else {
        setMailStatus(res.status === 429 ? 'mailLimit' : 'mailFailed', null, 'bad');
      }
    }).catch(function () {
      mailBusy = false;
      setMailStatus('mailFailed', null, 'bad');
    });
  }

  if (mailOn) {
    var mailForm = $('mail-form');
    if (mailForm) mailForm.addEventListener('submit', sendMail);
    var mailCancel = $('mail-cancel');
    if (mailCancel) mailCancel.addEventListener('click', cancelMail);
  }

  // ---- start ----
  var picker = $('lang');
  if (picker) {
    picker.addEventListener('change', function () {
      var v = picker.value;
      if (!offered(v)) return;
      if (!preview) persistLang(v);   // a preview leaves the reader's own choice alone
      setLang(v);
    });
  }
  // The server rendered the language of the qm_lang cookie (else Accept-Language); localStorage covers a
  // visitor whose cookie was cleared but whose queue-host storage was not.
  // A preview shows the language it was made for.
  var fromCookie = preview ? null : cookieLang();
  var saved = preview ? null : fromCookie || storedLang();
  if (saved && offered(saved)) {
    if (!fromCookie) persistLang(saved);
    if (saved !== lang) setLang(saved);
  }

  // A preview: the state it was made for, rendered as the live page would; no join, no stream, no poll.
  function showPreview() {
    finished = true;
    var p = preview.status && typeof preview.status === 'object' ? preview.status : null;
    if (!p) {            // the line is full: the answer carries no place
      full = true;
      showFull();
      setConn('full');
      return;
    }
    if (typeof p.now === 'number') offset = p.now - Date.now();
    last = p;
    render(p);
    if (p.queueing !== 'reject') setConn(p.state === 'waiting' || p.state === 'scheduled' ? 'live' : 'done');
  }

  try {
    if (preview) showPreview(); else if (closed) showClosed(); else join();
  } catch (e) {
    setProblem('generic');
  }
})();
