// Warden console service worker: caches the static shell (hashed, immutable assets) and
// nothing else. Pages and API responses always come from the network.
'use strict';
const SHELL = 'warden-shell-%VERSION%';
const ASSETS = %ASSETS%;
self.addEventListener('install', (event) => {
  event.waitUntil(caches.open(SHELL).then((cache) => cache.addAll(ASSETS)));
});
self.addEventListener('activate', (event) => {
  event.waitUntil(caches.keys().then((keys) => Promise.all(
    keys.filter((key) => key !== SHELL).map((key) => caches.delete(key)))));
});
self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== 'GET' || url.origin !== location.origin ||
      !ASSETS.includes(url.pathname)) {
    return;
  }
  event.respondWith(caches.match(event.request).then((hit) => hit || fetch(event.request)));
});
