# frozen_string_literal: true

# Files as streams (Fs#open_read / read_stream, Fs#open_write /
# write_stream) and the exec output limit, against the installed gem
# (scripts/ruby-sdk.sh): several MiB in and out with the content checked, a
# missing file by its error class and code, truncation by output_limit.
require_relative "fresh_home"
require "digest"
require "stringio"
require "tempfile"

class TestStreams < Minitest::Test
  include FreshHome

  MIB = 1024 * 1024

  # +size+ bytes that are no repetition of a short pattern.
  def blob(size)
    out = +"".b
    i = 0
    while out.bytesize < size
      out << Digest::SHA256.digest([i].pack("Q>"))
      i += 1
    end
    out.byteslice(0, size)
  end

  def test_several_mib_in_and_out
    data = blob((6 * MIB) + 12_345)
    Burrow::Sandbox.create("rb-streams", image: IMAGE) do |sb|
      # An Enumerator of chunks in; chunks out through a block.
      pieces = Enumerator.new { |y| (0...data.bytesize).step(300_000) { |i| y << data.byteslice(i, 300_000) } }
      assert_equal data.bytesize, sb.fs.write_stream("/tmp/a.bin", pieces)
      sum = sb.exec("sha256sum /tmp/a.bin | cut -d' ' -f1").stdout.strip
      assert_equal Digest::SHA256.hexdigest(data), sum
      sizes = []
      got = +"".b
      ended = sb.fs.read_stream("/tmp/a.bin") do |chunk|
        sizes << chunk.bytesize
        got << chunk
      end
      assert_nil ended
      assert_equal data, got
      assert_operator sizes.size, :>, 1
      assert_operator sizes.max, :<=, 256 * 1024

      # A File in (an IO), IO.copy_stream out of the reader into a File.
      Tempfile.create("rb-streams", binmode: true) do |src|
        src.write(data)
        src.rewind
        assert_equal data.bytesize, sb.fs.write_stream("/tmp/b.bin", src)
      end
      Tempfile.create("rb-streams-out", binmode: true) do |dst|
        IO.copy_stream(sb.fs.open_read("/tmp/b.bin"), dst)
        dst.flush
        assert_equal Digest::SHA256.hexdigest(data), Digest::SHA256.file(dst.path).hexdigest
      end

      # The Enumerator form, strings, StringIO, append, mode.
      assert_equal data, sb.fs.read_stream("/tmp/a.bin").reduce(+"".b, :<<)
      assert_equal 8, sb.fs.write_stream("/tmp/c.txt", ["one ", "two "], mode: 0o600)
      assert_equal 5, sb.fs.write_stream("/tmp/c.txt", StringIO.new("three"), append: true)
      assert_equal "one two three", sb.fs.read("/tmp/c.txt")
      assert_equal 0o600, sb.fs.stat("/tmp/c.txt").mode & 0o777

      # The writer: with a block it finishes and answers the count;
      # IO.copy_stream writes into it.
      n = sb.fs.open_write("/tmp/d.txt") do |w|
        w << "x" * 10
        w.write("y", "z")
        IO.copy_stream(StringIO.new("copied"), w)
      end
      assert_equal 18, n
      assert_equal "#{'x' * 10}yzcopied", sb.fs.read("/tmp/d.txt")

      # The reader: read(n), readpartial, close part way; the sandbox serves on.
      r = sb.fs.open_read("/tmp/a.bin")
      assert_equal data.byteslice(0, 1000), r.read(1000)
      assert_equal data.byteslice(1000, 10), r.readpartial(10)
      r.close
      assert_nil r.read_chunk
      assert_equal "ok\n", sb.exec(%w[echo ok]).stdout

      # Empty in, empty out.
      assert_equal 0, sb.fs.write_stream("/tmp/empty", [])
      assert_equal [], sb.fs.read_stream("/tmp/empty").to_a
      assert_nil sb.fs.open_read("/tmp/empty").read(1)
    end
  end

  def test_stream_errors_are_typed
    Burrow::Sandbox.create("rb-stream-errors", image: IMAGE) do |sb|
      e = assert_raises(Burrow::GuestError) { sb.fs.open_read("/nope") }
      assert_equal ["guest", "not_found"], [e.code, e.guest["code"]]
      e = assert_raises(Burrow::GuestError) { sb.fs.read_stream("/nope").first }
      assert_equal "not_found", e.guest["code"]
      e = assert_raises(Burrow::GuestError) { sb.fs.write_stream("/no/such/dir/f", %w[a b]) }
      assert_equal "not_found", e.guest["code"]
      assert_raises(Burrow::InvalidArgumentError) { sb.fs.open_read("relative") }
      assert_raises(Burrow::InvalidArgumentError) { sb.fs.write_stream("relative", "x") }
      assert_raises(TypeError) { sb.fs.write_stream("/tmp/x", 42) }
      refute sb.fs.exist?("/tmp/x"), "a wrong source touches no file"
      assert_equal "ok\n", sb.exec(%w[echo ok]).stdout
    end
  end

  def test_exec_output_limit_truncates
    Burrow::Sandbox.create("rb-limits", image: IMAGE) do |sb|
      out = sb.exec("head -c 3000000 /dev/zero | tr '\\0' a; exit 3", output_limit: 1000)
      assert_equal "a" * 1000, out.stdout
      assert_predicate out, :truncated?
      assert_equal 3, out.exit_code
      out = sb.exec("echo 0123456789 >&2; echo out", output_limit: 4)
      assert_equal ["out\n", "0123", true], [out.stdout, out.stderr, out.truncated?]
      out = sb.exec(%w[echo short], output_limit: 1000)
      assert_equal ["short\n", false], [out.stdout, out.truncated?]
      refute_predicate sb.exec(%w[echo whole]), :truncated?
    end
  end

  def test_close_ends_a_waiting_read_and_abandon_refuses_writes
    Burrow::Sandbox.create("rb-stream-close", image: IMAGE) do |sb|
      # A FIFO whose writer sends one line, then holds it open for 30 s.
      sb.exec(["sh", "-c", "rm -f /tmp/p; mkfifo /tmp/p; (echo first; sleep 30) > /tmp/p &"])
      reader = sb.fs.open_read("/tmp/p")
      assert_equal "first\n", reader.read_chunk
      waiting = Thread.new { reader.read_chunk }
      sleep 0.3
      assert waiting.alive?, "the second pull waits on the held FIFO"
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      reader.close
      assert_nil waiting.value
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 5
      assert_equal "ok\n", sb.exec(%w[echo ok]).stdout

      writer = sb.fs.open_write("/tmp/w.txt")
      writer.write("kept")
      writer.abandon
      e = assert_raises(Burrow::InvalidArgumentError) { writer.write("more") }
      assert_equal "invalid_argument", e.code

      # A block that raises abandons the write and the error goes on.
      assert_raises(RangeError) do
        sb.fs.open_write("/tmp/x.txt") do |w|
          w.write("half")
          raise RangeError, "the source failed"
        end
      end
      assert_equal 5, sb.fs.open_write("/tmp/y.txt") { |w| w.write("whole") }
    end
  end
end
