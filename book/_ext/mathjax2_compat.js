// ipywidgets 8 typesets widget labels through the MathJax 2 API (MathJax.Hub.Queue), but
// the book loads MathJax 3, which has no Hub: every widget label would throw. Forward
// those calls to MathJax 3. Loaded with defer after MathJax, so window.MathJax is MathJax 3.
(function () {
  const mj = window.MathJax;
  if (!mj || !mj.version || !mj.startup || mj.Hub) return;
  mj.Hub = {
    Queue: function (...jobs) {
      for (const job of jobs) {
        if (Array.isArray(job) && job[0] === "Typeset" && job[2]) {
          mj.startup.promise.then(() => mj.typesetPromise([job[2]]));
        }
      }
    },
  };
})();
