// While an email sends, its report page asks status.json every two seconds and shows the run's
// progress; when the send ends the page reloads to show the final figures. Without this script
// the page still shows everything, as of when it was loaded.
(function () {
  var section = document.getElementById("progress");
  if (!section) return;
  var url = section.getAttribute("data-status-url");
  var bar = document.getElementById("progress-bar");
  var words = document.getElementById("progress-words");
  function ask() {
    fetch(url, {credentials: "same-origin", cache: "no-store"}).then(function (answer) {
      if (!answer.ok) throw new Error("status " + answer.status);
      return answer.json();
    }).then(function (status) {
      document.getElementById("email-status").textContent = status.status;
      var p = status.progress;
      var total = p ? p.recipients_total : status.recipients;
      var sent = p ? p.recipients_sent : 0;
      if (total > 0) { bar.max = total; bar.value = sent; }
      words.textContent = (p ? sent.toLocaleString() + " of " + total.toLocaleString() + " recipients sent, " +
        p.batches_sent + " of " + p.batches_total + " batches" : "batches " + status.batches.submitted + " of " +
        status.batches.total + " submitted") + (status.waiting_for ? "; waits for " + status.waiting_for : "");
      if (status.status === "pending" || status.status === "submitting") {
        setTimeout(ask, 2000);
      } else {
        location.reload();
      }
    }).catch(function () {
      words.textContent = "The status could not be read; trying again.";
      setTimeout(ask, 5000);
    });
  }
  ask();
})();
