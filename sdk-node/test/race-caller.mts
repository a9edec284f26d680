// One caller of a conformance `race` step with `"processes": true`, run in
// its own Node process by conformance-runner.mjs (child_process.fork). It
// loads the package, says it is ready, waits for the barrier ("go"), runs
// its step once and reports the outcome over the IPC channel.
import { configure } from "burrow";
import { Runner, type RaceReport, type RaceTask } from "./conformance-runner.mjs";

process.once("message", (m: { task: RaceTask }) => {
  const task = m.task;
  if (task.home !== null) configure({ home: task.home });
  const runner = new Runner({ image: task.image, home: task.home, cleanup: false });
  process.once("message", async () => {
    let report: RaceReport;
    try {
      report = await runner.raceCall(task.do, task.keys);
    } catch (e) {
      report = { ok: false, code: null, error: e instanceof Error ? `${e.stack}` : String(e) };
    }
    report.pid = process.pid;
    process.send!({ report }, () => process.disconnect());
  });
  process.send!({ ready: true });
});
