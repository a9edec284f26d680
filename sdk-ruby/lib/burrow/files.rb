# frozen_string_literal: true

module Burrow
  # File operations in a running sandbox (absolute guest paths; contents
  # are binary Strings).
  class Fs
    # How much of an IO {#write_stream} reads at a time.
    STREAM_CHUNK = 1 << 20

    # @api private
    def initialize(native)
      @native = native
    end

    # @return [String] the content (binary)
    def read(path) = Base64.decode64(call(op: "fs_read", path: path))

    # Writes +data+ (creating or truncating the file).
    # @param mode [Integer, nil] permission bits
    def write(path, data, mode: nil) = call({ op: "fs_write", path: path, mode: mode }, data) && nil

    # @return [Array<DirEntry>]
    def list(path) = call(op: "fs_list", path: path).map { |e| DirEntry.from_json(e) }

    # @return [FileStat]
    def stat(path) = FileStat.from_json(call(op: "fs_stat", path: path))

    # @return [Boolean]
    def exist?(path) = call(op: "fs_exists", path: path)

    # Makes a directory (+parents: true+: with its parents, and no error
    # if it exists).
    # @return [nil]
    def mkdir(path, parents: false) = call(op: "fs_mkdir", path: path, parents: parents) && nil

    # Removes a file, or a directory (+recursive: true+: with its contents).
    # @return [nil]
    def remove(path, recursive: false) = call(op: "fs_remove", path: path, recursive: recursive) && nil

    # Renames +from+ to +to+ (both in the sandbox).
    # @return [nil]
    def rename(from, to) = call(op: "fs_rename", from: from, to: to) && nil

    # Opens a file to read as a stream; a missing file (or a directory)
    # raises here ({GuestError}, +guest_code+ "not_found").
    # @return [FileReader]
    def open_read(path) = FileReader.new(call(op: "fs_open_read", path: path))

    # The file's content in chunks (binary Strings of at most 256 KiB),
    # read from the sandbox as they are taken (memory stays flat). With a
    # block, yields each chunk (a missing file raises before the first);
    # without one, an Enumerator (the file is opened by its first step).
    # @yieldparam chunk [String]
    # @return [nil, Enumerator]
    def read_stream(path, &block)
      return enum_for(:read_stream, path) unless block

      reader = open_read(path)
      begin
        reader.each(&block)
      ensure
        # A block left early (break, an exception) releases the file.
        reader.close
      end
      nil
    end

    # Opens a file to write as a stream: created (with +mode+, default
    # 0644) or truncated, or appended to with +append: true+. With a block,
    # yields the writer, finishes the file when the block is left (it
    # returns, or +break+ or +throw+ leave it) and answers the number of
    # bytes written; a block that raises (or whose thread is killed)
    # abandons the write at once and the exception goes on. A block that
    # abandoned the writer itself answers nil.
    # @return [FileWriter, Integer, nil]
    def open_write(path, mode: nil, append: false)
      writer = FileWriter.new(call(op: "fs_open_write", path: path, mode: mode, append: append))
      return writer unless block_given?

      outcome = :left # by break or throw (or a killed thread), unless set below
      begin
        yield writer
        outcome = :returned
      rescue Exception # rubocop:disable Lint/RescueException -- re-raised
        outcome = :raised
        FileWriter.abandon_quietly(writer)
        raise
      ensure
        # Never left to the garbage collector: a block left by break or
        # throw finishes the file (as a File.open block closes its file),
        # a killed thread abandons it.
        if outcome == :left && !writer.abandoned?
          Thread.current.status == "aborting" ? FileWriter.abandon_quietly(writer) : writer.finish
        end
      end
      writer.abandoned? ? nil : writer.finish
    end

    # Writes a file from +source+, chunk by chunk: an IO (anything with
    # +read(n)+: a File, a pipe, a StringIO; read until its end), an
    # Enumerable of Strings (an Enumerator, an Array), or a String.
    # Answers the number of bytes written; a failure of the guest (a
    # missing directory) raises; a source that raises abandons the write
    # (what was written stays) and its exception goes on.
    # @return [Integer]
    def write_stream(path, source, mode: nil, append: false)
      chunks = Fs.chunks(source) # a wrong source raises before the file is touched
      open_write(path, mode: mode, append: append) do |writer|
        chunks.each { |chunk| writer.write(chunk) }
      end
    end

    # The chunks of a {#write_stream} source, as an Enumerator.
    # @api private
    def self.chunks(source)
      case source
      when String
        source.empty? ? [].each : [source].each
      else
        if source.respond_to?(:read)
          Enumerator.new do |y|
            while (chunk = source.read(STREAM_CHUNK)) && !chunk.empty?
              y << chunk
            end
          end
        elsif source.respond_to?(:each)
          source.to_enum(:each)
        else
          raise TypeError, "expected a String, an IO or an Enumerable of Strings, not #{source.class}"
        end
      end
    end

    private

    def call(op, data = nil) = Burrow.call(@native, op, data)
  end

  # A sandbox file being read as a stream ({Fs#open_read}). Enumerable
  # over its chunks, and IO-like enough for +IO.copy_stream+ (+read+,
  # +readpartial+). A chunk is fetched from the sandbox only when one is
  # needed, so a reader that stops reading holds the sandbox's side, not
  # memory. {#close} before the end abandons the read.
  class FileReader
    include Enumerable

    # @api private
    def initialize(native)
      @native = native
      @buf = nil
    end

    # The next chunk (binary), or nil at the end of the file (or once
    # closed).
    # @return [String, nil]
    def read_chunk
      unless @buf.nil? || @buf.empty?
        chunk = @buf
        @buf = nil
        return chunk
      end
      native = @native
      return nil if native.nil?

      data = Burrow.call(native, { op: "next" })
      if data.nil?
        @native = nil
        return nil
      end
      Base64.decode64(data)
    end

    # Yields each chunk until the end of the file.
    # @yieldparam chunk [String]
    def each
      return enum_for(:each) unless block_given?

      while (chunk = read_chunk)
        yield chunk
      end
      self
    end

    # At most +maxlen+ bytes (those at hand, or the next chunk); EOFError at
    # the end, as IO#readpartial.
    # @return [String]
    def readpartial(maxlen, outbuf = nil)
      @buf = read_chunk if @buf.nil? || @buf.empty?
      raise EOFError, "end of file reached" if @buf.nil?

      out = @buf.byteslice(0, maxlen)
      @buf = @buf.byteslice(maxlen..)
      outbuf ? outbuf.replace(out) : out
    end

    # As IO#read: without +length+, the rest of the file; with it, up to
    # +length+ bytes (nil at the end).
    # @return [String, nil]
    def read(length = nil, outbuf = nil)
      out = +"".b
      while length.nil? || out.bytesize < length
        want = length ? length - out.bytesize : STREAM_READ
        begin
          out << readpartial(want)
        rescue EOFError
          break
        end
      end
      return nil if length && length.positive? && out.empty?

      outbuf ? outbuf.replace(out) : out
    end

    # Abandons what is left of the read at once: a {#read_chunk} waiting
    # in another thread answers nil, and the guest's file is released.
    # @return [nil]
    def close
      native = @native
      @native = nil
      @buf = nil
      Burrow.call(native, { op: "close" }) if native
      nil
    end

    # Whether the read has ended or was closed.
    def closed? = @native.nil? && (@buf.nil? || @buf.empty?)

    STREAM_READ = 1 << 20
    private_constant :STREAM_READ
  end

  # A sandbox file being written as a stream ({Fs#open_write}): IO-like
  # enough for +IO.copy_stream+ (+write+, +<<+). +write+ waits while the
  # sandbox has not taken the previous MiB (flow control); {#finish}
  # completes the file, and raises a failure of the guest (a missing
  # directory, no space) at the latest. {#abandon} (or leaving it
  # unfinished, at the latest when it is collected) abandons the write
  # (what was written stays).
  class FileWriter
    # @api private
    def initialize(native)
      @native = native
      @written = nil
      @abandoned = false
    end

    # Appends the Strings; answers the number of bytes written.
    # @return [Integer]
    def write(*data)
      data.sum do |d|
        d = d.to_s
        raise IOError, "the file is finished" if @native.nil?

        Burrow.call(@native, { op: "write" }, d) unless d.empty?
        d.bytesize
      end
    end

    # Appends +data+; answers the writer.
    def <<(data)
      write(data)
      self
    end

    # Ends the file and waits until the sandbox has it: the number of
    # bytes written. Finishing again answers the same number.
    # @return [Integer]
    def finish
      return @written if @written
      raise IOError, "the file was abandoned (its finish failed)" if @native.nil?

      native = @native
      @native = nil
      @written = Burrow.call(native, { op: "finish" })
    end
    alias close finish

    # Abandons the write at once (a {#write} waiting in another thread
    # ends): the guest's file is closed with what was written, and a later
    # {#write} or {#finish} raises {InvalidArgumentError}. Abandoning
    # twice, or a finished file, does nothing.
    # @return [nil]
    def abandon
      return nil if @native.nil?

      @abandoned = true
      Burrow.call(@native, { op: "close" })
      nil
    end

    # Whether {#abandon} was called (before the file was finished).
    def abandoned? = @abandoned

    # Abandons +writer+ on the way out of a failure, which an error of
    # the abandon must not hide.
    # @api private
    def self.abandon_quietly(writer)
      writer.abandon
    rescue StandardError
      nil
    end
  end
end
