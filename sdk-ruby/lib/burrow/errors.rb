# frozen_string_literal: true

module Burrow
  # An error of the burrow core; one subclass per core code (CODE), e.g.
  # {SandboxReplacedError}, {NotFoundError}.
  #
  # @!attribute [r] code
  #   @return [String] the core's code (+"not_found"+, ...)
  # @!attribute [r] sandbox_id
  #   @return [String, nil] the sandbox it is about
  # @!attribute [r] name
  #   @return [String, nil] the sandbox name it is about
  # @!attribute [r] status
  #   @return [Symbol, nil] the status that refused the call (+invalid_state+)
  # @!attribute [r] actual_id
  #   @return [String, nil] the id that holds the name now (+sandbox_replaced+)
  # @!attribute [r] guest
  #   @return [Hash, nil] the agent's error (+guest+): +{"code", "message"}+
  # @!attribute [r] after_ms
  #   @return [Integer, nil] the deadline in milliseconds (+timeout+)
  # @!attribute [r] sandboxes
  #   @return [Array<String>, nil] the sandboxes that use the snapshot
  #     (+snapshot_in_use+)
  # @!attribute [r] limit
  #   @return [Integer, nil] the quota's limit, in its own unit; +subject+
  #     is the quota (+quota_exceeded+)
  # @!attribute [r] retry_after_ms
  #   @return [Integer, nil] how long to wait before trying again, in
  #     milliseconds (+rate_limited+)
  # @!attribute [r] retry_after
  #   @return [Float, nil] the same wait in seconds (+rate_limited+)
  # @!attribute [r] body
  #   @return [Hash] the whole error body of the core
  class Error < StandardError
    attr_reader :code, :sandbox_id, :name, :status, :actual_id, :operation,
                :subject, :reason, :after_ms, :guest, :path, :sandboxes,
                :limit, :retry_after_ms, :retry_after, :body

    def initialize(body)
      @body = body
      @code = body["code"]
      @sandbox_id = body["id"]
      @name = body["name"]
      @status = body["status"]&.to_sym
      @actual_id = body["actual_id"]
      @operation = body["operation"]
      @subject = body["subject"]
      @reason = body["reason"]
      @after_ms = body["after_ms"]
      @guest = body["guest"]
      @path = body["path"]
      @sandboxes = body["sandboxes"]
      @limit = body["limit"]
      @retry_after_ms = body["retry_after_ms"]
      @retry_after = @retry_after_ms && (@retry_after_ms / 1000.0)
      super(body["message"])
    end
  end

  CODES = {
    "sandbox_replaced" => :SandboxReplacedError,
    "already_exists" => :AlreadyExistsError,
    "not_found" => :NotFoundError,
    "invalid_state" => :InvalidStateError,
    "invalid_name" => :InvalidNameError,
    "invalid_config" => :InvalidConfigError,
    "invalid_image" => :InvalidImageError,
    "invalid_argument" => :InvalidArgumentError,
    "starting" => :StartingError,
    "start_failed" => :StartFailedError,
    "timeout" => :TimeoutError,
    "runtime_unavailable" => :RuntimeUnavailableError,
    "guest" => :GuestError,
    "protocol" => :ProtocolError,
    "store" => :StoreError,
    "io" => :IOError,
    "unauthorized" => :UnauthorizedError,
    "unsupported" => :UnsupportedError,
    "port_unavailable" => :PortUnavailableError,
    "snapshot_in_use" => :SnapshotInUseError,
    "forbidden" => :ForbiddenError,
    "quota_exceeded" => :QuotaExceededError,
    "rate_limited" => :RateLimitedError
  }.freeze

  # Every error class by its code.
  ERROR_CLASSES = CODES.to_h do |code, name|
    cls = Class.new(Error)
    cls.const_set(:CODE, code)
    const_set(name, cls)
    [code, cls]
  end.freeze

  # The error of a core error body.
  def self.error_from(body)
    (ERROR_CLASSES[body["code"]] || Error).new(body)
  end
end
