# frozen_string_literal: true

# One caller of a conformance race step with "processes": true, run in its
# own Ruby process by conformance_runner.rb. It reads its task (a JSON line
# on stdin), loads the gem, says "ready", waits for the barrier ("go" on
# stdin), runs its step once and writes its report (a JSON line) to stdout.
$stdout.sync = true
report_to = $stdout.dup
$stdout.reopen($stderr) # anything else the caller prints goes to stderr

require_relative "conformance_runner"

task = JSON.parse($stdin.gets)
Burrow.configure(home: task["home"]) if task["home"]
runner = Conformance::Runner.new(image: task["image"], home: task["home"], cleanup: false)
report_to.puts("ready")
$stdin.gets # the barrier
report =
  begin
    runner.race_call(task["do"], task["keys"])
  rescue StandardError => e
    { "ok" => false, "code" => nil, "error" => "#{e.class}: #{e.message}\n#{e.backtrace&.join("\n")}" }
  end
report["pid"] = Process.pid
report_to.puts(JSON.generate(Conformance.norm(report)))
report_to.flush
