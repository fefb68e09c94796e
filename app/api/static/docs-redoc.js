// Starts ReDoc on /redoc (app/api/docs.py). ReDoc writes its styles into <style> elements:
// the nonce the page was served with lets exactly those through the CSP. No search: it
// runs in a worker made from a blob: URL, which the CSP (the dashboard's) does not allow.
"use strict";
(function () {
  const root = document.getElementById("redoc");
  Redoc.init(root.dataset.openapi, { nonce: root.dataset.nonce, disableSearch: true }, root);
})();
