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
  # rust/: the crates of the native extension with the repository's
  # Cargo.lock (scripts/ruby-sdk.sh puts them there with vendor_rust.rb).
  s.files = Dir["lib/**/*.rb", "ext/**/*.rb", "rust/**/*", "sig/**/*.rbs", "README.md", "API.md"].select { |f| File.file?(f) }
  s.extensions = ["ext/burrow_native/extconf.rb"]
  s.require_paths = ["lib"]
  s.homepage = "https://github.com/burrow-dev/burrow"
  s.metadata = { "source_code_uri" => "https://github.com/burrow-dev/burrow/tree/main/sdk-ruby" }
end
