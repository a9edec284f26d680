# frozen_string_literal: true

# Builds the native extension burrow_native with cargo (the gem registry,
# and with it the rb_sys gem, is not needed): a Makefile whose `all` runs
# cargo and whose `install` copies the library where RubyGems asks.
#
# The Rust sources are the gem's own (rust/, a workspace of the crates the
# extension needs), or the burrow repository named by $BURROW_SOURCE_DIR
# (then $CARGO_TARGET_DIR and $BURROW_CARGO_PROFILE=dev can reuse its
# build; --workspace keeps the dependencies' features those of the
# workspace build, so nothing is compiled again).
require "rbconfig"

source = ENV.fetch("BURROW_SOURCE_DIR", File.expand_path("../../rust", __dir__))
profile = ENV.fetch("BURROW_CARGO_PROFILE", "release")
target_dir = ENV.fetch("CARGO_TARGET_DIR", File.join(Dir.pwd, "target"))
out_dir = profile == "dev" ? "debug" : profile
dlext = RbConfig::CONFIG["DLEXT"]

# $BURROW_NATIVE_LIB: a library cargo already built (the repository's test
# script builds it with the workspace, then installs the gem with it).
prebuilt = ENV.fetch("BURROW_NATIVE_LIB", nil)
# The supervisor the library embeds (bindings/core/build.rs): the gem's
# rust/burrow-supervisor, unless $BURROW_EMBED_SUPERVISOR says otherwise.
carried = File.join(source, "burrow-supervisor")
embed = ENV.fetch("BURROW_EMBED_SUPERVISOR", File.file?(carried) ? carried : "")
abort "cargo is needed to build burrow's native extension" unless prebuilt || system("cargo --version", out: File::NULL)
build = if prebuilt
          "cp #{prebuilt} burrow_native.#{dlext}"
        else
          "BURROW_EMBED_SUPERVISOR='#{embed}' cargo build --manifest-path #{source}/Cargo.toml --workspace --lib --profile #{profile} " \
            "--target-dir #{target_dir}\n\tcp #{target_dir}/#{out_dir}/libburrow_native.so burrow_native.#{dlext}"
        end

File.write("Makefile", <<~MAKE)
  sitearchdir = #{RbConfig::CONFIG["sitearchdir"]}
  sitelibdir = #{RbConfig::CONFIG["sitelibdir"]}
  RUBYARCHDIR = $(sitearchdir)

  all: burrow_native.#{dlext}

  burrow_native.#{dlext}:
  \t#{build}

  install: all
  \tmkdir -p $(RUBYARCHDIR)
  \tcp burrow_native.#{dlext} $(RUBYARCHDIR)/

  clean:
  \trm -f burrow_native.#{dlext}

  .PHONY: all install clean
MAKE
