// MangaAssist chat page: one WebSocket to /ws, answers rendered chunk by
// chunk, reconnection with exponential backoff and jitter.
"use strict";

const TEXT = {
  ja: {
    placeholder: "漫画について何でも聞いてください（例：おすすめの少年漫画は？）",
    send: "送信", connecting: "接続中…", open: "接続済み", closed: "切断（再接続します）",
    degraded: "簡易回答", tier: "回答元", reconnecting: (s) => `接続が切れました。${s}秒後に再接続します…`,
    retryAfter: (s) => `${s}秒後にもう一度お試しください。`, notConnected: "接続されていません。再接続をお待ちください。",
    keyPrompt: "このアシスタントを使うには API キーが必要です。キーを入力してください。", keyLabel: "API キー", keySave: "保存",
    greeting: "こんにちは！MangaAssistです。作品のおすすめ、新刊、配送や返品のことなど、お気軽にお尋ねください。",
    suggestions: ["おすすめの少年漫画は？", "ワンピースの最新刊はいくら？", "注文をキャンセルしたい"],
  },
  en: {
    placeholder: "Ask anything about manga (e.g. which shonen series do you recommend?)",
    send: "Send", connecting: "Connecting…", open: "Connected", closed: "Disconnected (reconnecting)",
    degraded: "degraded answer", tier: "answered by", reconnecting: (s) => `Connection lost. Reconnecting in ${s}s…`,
    retryAfter: (s) => `Please try again in ${s}s.`, notConnected: "Not connected. Please wait for the reconnection.",
    keyPrompt: "This assistant needs an API key. Enter yours to continue.", keyLabel: "API key", keySave: "Save",
    greeting: "Hi, I'm MangaAssist! Ask me for recommendations, new releases, shipping, returns and more.",
    suggestions: ["What manga do you recommend?", "How much is the latest One Piece volume?", "How do I cancel an order?"],
  },
};

const state = {
  locale: localStorage.getItem("locale") || ((navigator.language || "ja").startsWith("ja") ? "ja" : "en"),
  ws: null, attempt: 0, pending: new Map(), seq: 0,
  session: sessionStorage.getItem("session") || ("s-" + Math.random().toString(36).slice(2, 12)),
  // key is the API key this tab's user entered, when the gateway asks for
  // one (auth.keys set); it stays in this tab only.
  key: sessionStorage.getItem("apiKey") || "",
  // user names this browser to a gateway that trusts the page's word for
  // it (the demo profile), so that its budgets and costs are its own and
  // not every visitor's together; with an API key, the key's user wins.
  user: localStorage.getItem("user") || ("web-" + Math.random().toString(36).slice(2, 12)),
};
sessionStorage.setItem("session", state.session);
localStorage.setItem("user", state.user);

const $ = (id) => document.getElementById(id);

// DEBUG (the page opened with ?debug=1) shows under each answer the model
// tier, tokens, time and cost from the done frame, for operators; shoppers
// never see them.
const DEBUG = new URLSearchParams(location.search).get("debug") === "1";

function t() { return TEXT[state.locale]; }

function setLocale(l) {
  state.locale = l;
  localStorage.setItem("locale", l);
  document.documentElement.lang = l;
  for (const b of document.querySelectorAll("[data-locale]")) b.setAttribute("aria-pressed", String(b.dataset.locale === l));
  $("message").placeholder = t().placeholder;
  $("send").textContent = t().send;
  $("apikey-label").textContent = t().keyLabel;
  $("apikey-save").textContent = t().keySave;
  $("apikey-prompt").textContent = t().keyPrompt;
  setConn($("conn").dataset.state);
  welcome();
}

// welcome greets a conversation that has not started, with a few questions
// to start it; they go once the first message is sent.
function welcome() {
  const w = $("welcome");
  if (state.seq > 0) { w.hidden = true; return; }
  w.replaceChildren();
  const p = document.createElement("p");
  p.textContent = t().greeting;
  w.appendChild(p);
  for (const q of t().suggestions) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "suggestion";
    b.textContent = q;
    b.addEventListener("click", () => send(q));
    w.appendChild(b);
  }
  w.hidden = false;
}

// keyProtocols carries the API key on the WebSocket: a browser cannot set
// an Authorization header there, so the key goes as a subprotocol
// ("fmgate.bearer." + base64url), beside the one the gateway selects.
function keyProtocols() {
  if (!state.key) return undefined;
  const bytes = new TextEncoder().encode(state.key);
  const b64 = btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return ["fmgate.v1", "fmgate.bearer." + b64];
}

function askKey() {
  $("keyform").hidden = false;
  $("apikey").focus();
}

function setConn(s) {
  const el = $("conn");
  el.dataset.state = s;
  el.textContent = t()[s] || s;
}

function banner(text) {
  const b = $("banner");
  b.textContent = text || "";
  b.hidden = !text;
}

function addMessage(kind, text) {
  const li = document.createElement("li");
  li.className = "msg " + kind;
  const body = document.createElement("div");
  body.className = "text";
  body.textContent = text;
  li.appendChild(body);
  $("log").appendChild(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

function connect() {
  setConn("connecting");
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${proto}//${location.host}/ws`, keyProtocols());
  state.ws = ws;
  ws.onopen = () => { state.attempt = 0; setConn("open"); banner(""); };
  ws.onmessage = (ev) => {
    let f;
    try { f = JSON.parse(ev.data); } catch { return; }
    onFrame(f);
  };
  ws.onclose = () => {
    setConn("closed");
    for (const [id, p] of state.pending) fail(p, { code: "disconnected", message: t().notConnected });
    state.pending.clear();
    const delay = Math.min(30, 2 ** state.attempt) * (0.5 + Math.random() / 2);
    state.attempt++;
    banner(t().reconnecting(Math.ceil(delay)));
    setTimeout(connect, delay * 1000);
  };
}

function onFrame(f) {
  if (f.type === "heartbeat") return;
  const p = state.pending.get(f.requestId);
  if (f.type === "error" && f.code === "unauthorized") askKey();
  if (f.type === "error" && !p) {
    banner(f.code === "unauthorized" ? t().keyPrompt : f.message + (f.retryAfterSeconds ? " " + t().retryAfter(f.retryAfterSeconds) : ""));
    return;
  }
  if (!p) return;
  if (f.type === "status") {
    showStatus(p, f);
    return;
  }
  clearStatus(p);
  if (f.type === "chunk") {
    p.text += f.text;
    p.el.dataset.chunks = String(Number(p.el.dataset.chunks || 0) + 1);
    p.el.querySelector(".text").textContent = p.text;
    p.el.scrollIntoView({ block: "end" });
  } else if (f.type === "done") {
    p.el.classList.remove("streaming");
    p.el.dataset.tier = f.tier;
    // Shoppers see only whether the answer is a simplified one; which model
    // answered, its tokens and its cost are for operators (?debug=1).
    if (f.degraded || DEBUG) {
      const meta = document.createElement("div");
      meta.className = "meta";
      meta.dataset.testid = "meta";
      if (f.degraded) {
        const d = document.createElement("span");
        d.className = "degraded";
        d.textContent = t().degraded;
        meta.appendChild(d);
      }
      if (DEBUG) {
        const tier = document.createElement("span");
        tier.className = "tier";
        tier.textContent = `${t().tier}: ${f.tier}`;
        meta.appendChild(tier);
        const m = f.metrics || {};
        const stats = document.createElement("span");
        stats.className = "stats";
        stats.textContent = `${(f.tokens || {}).output || 0} tok · ${m.total_ms || 0} ms · $${(f.costUsd || 0).toFixed(5)}`;
        meta.appendChild(stats);
      }
      p.el.appendChild(meta);
    }
    p.el.dataset.done = "true";
    state.pending.delete(f.requestId);
  } else if (f.type === "error") {
    fail(p, f);
    state.pending.delete(f.requestId);
  }
}

// showStatus tells the user why the answer has not started (the gateway is
// retrying, falling back to another model, or waiting in line); the notice
// goes away as soon as the answer's text arrives.
function showStatus(p, f) {
  let s = p.el.querySelector(".status");
  if (!s) {
    s = document.createElement("div");
    s.className = "meta status";
    s.dataset.testid = "status";
    s.setAttribute("role", "status");
    p.el.appendChild(s);
  }
  s.dataset.state = f.state;
  s.textContent = f.message;
  p.el.dataset.statusSeen = (p.el.dataset.statusSeen ? p.el.dataset.statusSeen + " " : "") + f.state;
}

function clearStatus(p) {
  const s = p.el.querySelector(".status");
  if (s) s.remove();
}

function fail(p, f) {
  p.el.classList.remove("streaming");
  p.el.classList.add("error");
  const e = document.createElement("div");
  e.className = "meta err";
  e.dataset.testid = "error";
  e.textContent = f.code === "unauthorized" ? t().keyPrompt : f.message + (f.retryAfterSeconds ? " " + t().retryAfter(f.retryAfterSeconds) : "");
  p.el.appendChild(e);
  p.el.dataset.done = "error";
}

function send(text) {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) { banner(t().notConnected); return; }
  $("welcome").hidden = true;
  addMessage("user", text);
  const id = `r${Date.now().toString(36)}-${++state.seq}`;
  const el = addMessage("bot streaming", "");
  el.dataset.requestId = id;
  state.pending.set(id, { el, text: "" });
  state.ws.send(JSON.stringify({ action: "sendMessage", requestId: id, sessionId: state.session, userId: state.user, message: text, locale: state.locale }));
}

document.addEventListener("DOMContentLoaded", () => {
  for (const b of document.querySelectorAll("[data-locale]")) b.addEventListener("click", () => setLocale(b.dataset.locale));
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("message").value.trim();
    if (!text) return;
    $("message").value = "";
    send(text);
  });
  $("keyform").addEventListener("submit", (e) => {
    e.preventDefault();
    state.key = $("apikey").value.trim();
    sessionStorage.setItem("apiKey", state.key);
    $("apikey").value = "";
    $("keyform").hidden = true;
    // Reconnect with the key at once: the next message goes with it.
    if (state.ws) { state.attempt = 0; state.ws.onclose = null; state.ws.close(); }
    connect();
  });
  $("message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  setLocale(state.locale);
  connect();
});
