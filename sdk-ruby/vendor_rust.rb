# frozen_string_literal: true

# Copies the Rust crates the native extension needs into DEST (the gem's
# rust/ directory): a cargo workspace of its own with the repository's
# Cargo.lock, so that `gem install` builds the same dependency versions the
# repository tests.
#
#   ruby sdk-ruby/vendor_rust.rb REPO_ROOT DEST
#
# Each crate keeps its manifest without what only its tests need
# (dev-dependencies, [[test]]/[[bench]]/[[example]] targets), its src/,
# and its migrations/ and build.rs where it has them.
require "fileutils"

CRATES = %w[core/protocol core/layer core/net core/burrow bindings/core bindings/ruby].freeze
TEST_ONLY = /\A\[(dev-dependencies|\[test\]|\[bench\]|\[example\]|target\..*\.dev-dependencies)/

root, dest = ARGV
abort "usage: vendor_rust.rb REPO_ROOT DEST" unless root && dest

# The manifest text without the sections in +drop+ (a section runs to the
# next header).
def without_sections(text, drop)
  keep = true
  text.lines.select do |line|
    keep = !line.match?(drop) if line.start_with?("[")
    keep
  end.join
end

FileUtils.rm_rf(dest)
FileUtils.mkdir_p(dest)
CRATES.each do |crate|
  from = File.join(root, crate)
  to = File.join(dest, crate)
  FileUtils.mkdir_p(to)
  File.write(File.join(to, "Cargo.toml"), without_sections(File.read(File.join(from, "Cargo.toml")), TEST_ONLY))
  %w[src migrations build.rs].each do |part|
    FileUtils.cp_r(File.join(from, part), to) if File.exist?(File.join(from, part))
  end
end

# The workspace manifest: these members, and the shared dependencies that
# are not crates of the repository left behind.
# (and no profile of a crate left behind).
manifest = without_sections(File.read(File.join(root, "Cargo.toml")), /\A\[profile\.[a-z]+\.package\.burrow-agent\]/)
manifest = manifest.sub(/^members = \[.*?\]$/m, "members = #{CRATES.inspect.tr("'", '"')}")
manifest = manifest.lines.reject do |line|
  path = line[/path = "([^"]+)"/, 1]
  path && !CRATES.include?(path)
end.join
File.write(File.join(dest, "Cargo.toml"), manifest)
FileUtils.cp(File.join(root, "Cargo.lock"), dest)
