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

  # Guest-side witnesses that a stream released the guest's file (while
  # the SDK's object is still referenced, so no collection did it):
  # - /tmp/p, a FIFO whose writer sends one line and then nothing until
  #   /tmp/go exists (a second pull waits); then it writes a line every
  #   0.1 s, which fails (SIGPIPE/EPIPE) only once no reader holds the
  #   FIFO, and /tmp/gone appears.
  # - /tmp/q, a FIFO read by `cat`, which ends (and /tmp/q.done appears)
  #   only once no writer holds it.
  HELD_FIFO = "rm -f /tmp/p /tmp/go /tmp/gone; mkfifo /tmp/p; " \
              "( (echo first; until [ -e /tmp/go ]; do sleep 0.1; done; " \
              "while echo more; do sleep 0.1; done) > /tmp/p; echo $? > /tmp/gone ) " \
              "</dev/null >/dev/null 2>&1 &"
  READ_FIFO = "rm -f /tmp/q /tmp/q.done; mkfifo /tmp/q; " \
              "(cat /tmp/q > /tmp/q.out; echo $? > /tmp/q.done) </dev/null >/dev/null 2>&1 &"

  # Whether +path+ exists in the sandbox within +seconds+.
  def appears?(sb, path, seconds = 10)
    (seconds * 10).times do
      return true if sb.fs.exist?(path)

      sleep 0.1
    end
    false
  end

  # Lets the FIFO's writer go on: whether it then finds no reader.
  def reader_released?(sb)
    sb.fs.write("/tmp/go", "")
    appears?(sb, "/tmp/gone")
  end

  def test_close_ends_a_waiting_read_at_once_and_releases_the_file
    Burrow::Sandbox.create("rb-stream-close", image: IMAGE) do |sb|
      sb.exec(["sh", "-c", HELD_FIFO])
      reader = sb.fs.open_read("/tmp/p")
      assert_equal "first\n", reader.read_chunk
      waiting = Thread.new { reader.read_chunk }
      sleep 0.3
      assert waiting.alive?, "the second pull waits on the held FIFO"
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      reader.close
      assert_nil waiting.value
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 5
      assert_nil reader.read_chunk
      assert_predicate reader, :closed?
      reader.close # closing twice is harmless
      assert reader_released?(sb), "the guest still holds the FIFO"
      assert_equal "ok\n", sb.exec(%w[echo ok]).stdout

      # read_stream's block left early closes its reader.
      sb.exec(["sh", "-c", HELD_FIFO])
      sb.fs.read_stream("/tmp/p") do |chunk|
        assert_equal "first\n", chunk
        break
      end
      assert reader_released?(sb), "the guest still holds the FIFO (read_stream)"
    end
  end

  def test_abandon_closes_the_file_and_refuses_later_calls
    Burrow::Sandbox.create("rb-stream-abandon", image: IMAGE) do |sb|
      sb.exec(["sh", "-c", READ_FIFO])
      writer = sb.fs.open_write("/tmp/q")
      writer.write("kept")
      writer.abandon
      assert_predicate writer, :abandoned?
      assert appears?(sb, "/tmp/q.done"), "the guest still holds the FIFO"
      e = assert_raises(Burrow::InvalidArgumentError) { writer.write("more") }
      assert_equal "invalid_argument", e.code
      # Not finished: finish is refused too, by its class.
      e = assert_raises(Burrow::InvalidArgumentError) { writer.finish }
      assert_equal "invalid_argument", e.code
      assert_nil writer.abandon # abandoning again does nothing
      assert_equal "ok\n", sb.exec(%w[echo ok]).stdout
    end
  end

  def test_open_write_block_abandons_on_raise_and_finishes_otherwise
    Burrow::Sandbox.create("rb-stream-block", image: IMAGE) do |sb|
      # A block that raises abandons the write (the file is released at
      # once) and the error goes on.
      sb.exec(["sh", "-c", READ_FIFO])
      kept = nil
      assert_raises(RangeError) do
        sb.fs.open_write("/tmp/q") do |w|
          kept = w
          w.write("half")
          raise RangeError, "the source failed"
        end
      end
      assert_predicate kept, :abandoned?
      assert appears?(sb, "/tmp/q.done"), "the guest still holds the FIFO (raise)"
      assert_raises(Burrow::InvalidArgumentError) { kept.finish }

      # A block left by break finishes the file.
      sb.exec(["sh", "-c", READ_FIFO])
      sb.fs.open_write("/tmp/q") do |w|
        kept = w
        w.write("early")
        break
      end
      refute_predicate kept, :abandoned?
      assert appears?(sb, "/tmp/q.done"), "the guest still holds the FIFO (break)"
      assert_equal 5, kept.finish # finished already: the same count

      # write_stream's source raising abandons the write.
      sb.exec(["sh", "-c", READ_FIFO])
      failing = Enumerator.new do |y|
        y << "part"
        raise RangeError, "the source failed"
      end
      assert_raises(RangeError) { sb.fs.write_stream("/tmp/q", failing) }
      assert appears?(sb, "/tmp/q.done"), "the guest still holds the FIFO (write_stream)"

      # A block that abandoned the writer itself answers nil; one that
      # returns answers the bytes written.
      assert_nil(sb.fs.open_write("/tmp/x.txt") { |w| w.abandon })
      assert_equal 5, sb.fs.open_write("/tmp/y.txt") { |w| w.write("whole") }
      assert_equal "whole", sb.fs.read("/tmp/y.txt")
    end
  end
end
