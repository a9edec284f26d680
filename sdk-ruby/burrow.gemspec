# frozen_string_literal: true

Gem::Specification.new do |s|
  s.name = "burrow"
  s.version = "0.1.0"
  s.summary = "Sandboxes that converge, sleep when idle and wake on the next call"
  s.description = "The Ruby SDK of burrow: containers and microVMs by name, over the Rust engine " \
                  "(a native extension built by cargo on install)."
  s.license = "Apache-2.0"
  s.authors = ["burrow developers"]
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb", "ext/**/*.rb", "rust/**/*", "sig/**/*.rbs", "README.md", "API.md"]
  s.extensions = ["ext/burrow_native/extconf.rb"]
  s.require_paths = ["lib"]
end
