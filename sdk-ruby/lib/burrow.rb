# frozen_string_literal: true

require "json"
require "base64"
require "burrow_native"
require "burrow/errors"

# burrow: sandboxes that converge by name, sleep when idle and wake on the
# next call. Every call goes to the Rust binding core through the native
# extension (with the GVL released); the core owns every rule and error.
module Burrow
  # Runs one operation of the core; raises the Burrow::Error of a failure.
  def self.call(target, op, data = nil)
    json, object = Native.call(target, JSON.generate(op.compact), data)
    answer = JSON.parse(json)
    raise error_from(answer["error"]) if answer.key?("error")

    object || answer["ok"]
  end

  # The core's error codes.
  def self.error_codes = Native.error_codes

  # Sets the burrow home of the calls that follow (nil: $BURROW_HOME).
  def self.configure(home: nil) = Native.configure(home)
end

require "burrow/sandbox"
