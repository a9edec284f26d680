# frozen_string_literal: true

require "fileutils"

# `gem build burrow.gemspec` in a burrow checkout (sdk-ruby/) first puts
# into rust/ what `gem install` compiles (vendor_rust.rb: the crates of the
# native extension with the repository's Cargo.lock) and the supervisor the
# extension embeds (rust/burrow-supervisor: $BURROW_EMBED_SUPERVISOR when
# set, else a release build of it, stripped). Evaluated anywhere else (an
# installed gem's spec), it takes rust/ as it is.
here = __dir__
repo = File.expand_path("..", here)
if File.file?(File.join(repo, "core/cli/Cargo.toml")) && File.file?(File.join(here, "vendor_rust.rb"))
  rust = File.join(here, "rust")
  system(RbConfig.ruby, File.join(here, "vendor_rust.rb"), repo, rust, exception: true)
  supervisor = ENV.fetch("BURROW_EMBED_SUPERVISOR", "")
  if supervisor.empty?
    warn "==> cargo build --release --bin burrow-supervisor (the engine the gem carries; minutes on a cold checkout)"
    target = ENV.fetch("CARGO_TARGET_DIR", File.join(repo, "target"))
    system("cargo", "build", "--release", "-q", "-p", "burrow-cli", "--bin", "burrow-supervisor",
           "--manifest-path", File.join(repo, "Cargo.toml"), "--target-dir", target, exception: true)
    supervisor = File.join(target, "release/burrow-supervisor")
  end
  FileUtils.cp(supervisor, File.join(rust, "burrow-supervisor")) unless supervisor == "none"
  # The release profile keeps line tables; the gem needs none.
  system("strip", "--strip-debug", File.join(rust, "burrow-supervisor"), exception: true) unless supervisor == "none"
end

Gem::Specification.new do |s|
  s.name = "burrow"
  s.version = "0.1.0"
  s.summary = "Sandboxes that converge, sleep when idle and wake on the next call"
  s.description = "The Ruby SDK of burrow: containers and microVMs by name, over the Rust engine " \
                  "(a native extension built by cargo on install, which carries the sandbox supervisor)."
  s.license = "Apache-2.0"
  s.authors = ["burrow developers"]
  s.required_ruby_version = ">= 3.1"
  s.files = Dir.chdir(here) do
    Dir["lib/**/*.rb", "ext/**/*.rb", "rust/**/*", "sig/**/*.rbs", "README.md", "API.md"].select { |f| File.file?(f) }
  end
  s.extensions = ["ext/burrow_native/extconf.rb"]
  s.require_paths = ["lib"]
  s.homepage = "https://github.com/burrow-dev/burrow"
  s.metadata = { "source_code_uri" => "https://github.com/burrow-dev/burrow/tree/main/sdk-ruby" }
end
