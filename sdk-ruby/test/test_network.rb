# frozen_string_literal: true

# Networks and published ports of the Ruby SDK, against real sandboxes
# through the installed gem: a policy kept in the configuration and
# changed live, a bad rule raising its typed error, a taken host port
# raising PortUnavailableError, and a published port reaching a server in
# the sandbox. Loopback only.
require_relative "fresh_home"
require "socket"

class TestNetwork < Minitest::Test
  include FreshHome

  def test_a_policy_is_kept_and_changed_live
    policy = Burrow::NetworkPolicy.new(allow: ["pypi.org", "tcp:*.github.com:443"], deny: ["udp:*"])
    Burrow::Sandbox.create("rb-net", image: IMAGE, network: policy) do |sb|
      assert_equal policy, sb.info.config.network
      plan = sb.modify(network: { allow: ["files.pythonhosted.org"] })
      assert_equal :live, plan.changes.find { |c| c.field == :network }.applies
      assert_equal ["files.pythonhosted.org"], sb.info.config.network.allow
      assert_raises(Burrow::InvalidConfigError) { sb.modify(network: { allow: ["a..b"] }) }
      assert_equal ["files.pythonhosted.org"], sb.info.config.network.allow
      sb.modify(network: false)
      assert_equal false, sb.info.config.network
    end
  end

  def test_bad_rules_and_ports_are_typed_and_create_nothing
    assert_raises(Burrow::InvalidConfigError) do
      Burrow::Sandbox.create("rb-bad", image: IMAGE, network: { allow: ["pypi.org:9-8"] })
    end
    assert_raises(Burrow::InvalidConfigError) { Burrow::Sandbox.define("rb-bad", image: IMAGE, ports: ["80"]) }
    assert_raises(TypeError) { Burrow::Sandbox.define("rb-bad", image: IMAGE, network: 42) }
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("rb-bad") }
  end

  def test_a_published_port_reaches_the_sandbox_and_a_taken_one_is_typed
    taken = TCPServer.new("127.0.0.1", 0)
    port = taken.addr[1]
    handle = Burrow::Sandbox.define("rb-port", image: IMAGE, ports: ["#{port}:8000"])
    assert_raises(Burrow::PortUnavailableError) { handle.start }
    taken.close
    sb = handle.start
    assert_equal ["127.0.0.1:#{port}:8000"], sb.info.config.ports
    sb.exec(["sh", "-c", "setsid nc -ll -p 8000 -e echo hi </dev/null >/dev/null 2>&1 &"])
    got = ""
    100.times do
      begin
        got = TCPSocket.open("127.0.0.1", port) { |c| c.read.to_s }
      rescue SystemCallError
        got = ""
      end
      break unless got.empty?

      sleep 0.1
    end
    assert_equal "hi\n", got
  ensure
    begin
      Burrow::Sandbox.get("rb-port").destroy
    rescue Burrow::Error
      nil
    end
  end

  def test_a_secret_reaches_its_host_and_never_the_sandbox
    value = "rb_secret_value_77e0"
    server = TCPServer.new("127.0.0.1", 0)
    heads = Queue.new
    thread = Thread.new do
      loop do
        c = server.accept
        head = +""
        head << c.readpartial(4096) until head.include?("\r\n\r\n")
        heads << head
        c.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        c.close
      end
    rescue IOError, EOFError
      nil
    end
    port = server.addr[1]
    secret = Burrow::Secret.new(name: "TOKEN", value: value, hosts: ["127.0.0.1"])
    refute_includes secret.inspect, value
    assert Burrow::Sandbox.capabilities.secrets
    Burrow::Sandbox.create("rb-secret", image: IMAGE, network: { allow: ["127.0.0.1"] }, secrets: [secret]) do |sb|
      got = sb.info.config.secrets.first
      assert_equal ["TOKEN", ["127.0.0.1"]], [got.name, got.hosts]
      assert_match(/\ABURROW_SECRET_[0-9a-f]{32}\z/, got.placeholder)
      out = sb.exec(["sh", "-c",
                     "echo $TOKEN; wget -q -O - --header \"Authorization: Bearer $TOKEN\" http://10.0.2.2:#{port}/"])
      assert_equal "#{got.placeholder}\nok", out.stdout
      assert_includes heads.pop, "Authorization: Bearer #{value}\r\n"
    end
    assert_raises(Burrow::InvalidConfigError) { Burrow::Sandbox.create("rb-secret-bad", image: IMAGE, secrets: [secret]) }
    bad = Burrow::Secret.new(name: "TOKEN", value: value, hosts: ["bad host"])
    assert_raises(Burrow::InvalidConfigError) do
      Burrow::Sandbox.create("rb-secret-bad", image: IMAGE, network: true, secrets: [bad])
    end
    assert_raises(TypeError) { Burrow::Sandbox.define("rb-secret-bad", image: IMAGE, secrets: secret) }
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("rb-secret-bad") }
  ensure
    server&.close
    thread&.kill
  end

  # A secret's headers round-trip through the create and the record, and
  # its value reaches the loopback server in them only; a header that
  # routes the request, or too many, is the core's InvalidConfigError.
  def test_a_secrets_headers_round_trip_and_get_the_value
    value = "rb_header_value_5a10"
    server = TCPServer.new("127.0.0.1", 0)
    heads = Queue.new
    thread = Thread.new do
      loop do
        c = server.accept
        head = +""
        head << c.readpartial(4096) until head.include?("\r\n\r\n")
        heads << head
        c.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        c.close
      end
    rescue IOError, EOFError
      nil
    end
    port = server.addr[1]
    key = Burrow::Secret.new(name: "KEY", value: value, hosts: ["127.0.0.1"], headers: ["X-Api-Key"])
    token = Burrow::Secret.new(name: "TOKEN", value: "rb_default_value_5a11", hosts: ["127.0.0.1"])
    refute_includes key.inspect, value
    Burrow::Sandbox.create("rb-secret-headers", image: IMAGE, network: { allow: ["127.0.0.1"] },
                           secrets: [key, token]) do |sb|
      got_key, got_token = sb.info.config.secrets
      assert_equal [["X-Api-Key"], []], [got_key.headers, got_token.headers]
      get = lambda do |header, path|
        sb.exec(["sh", "-c", "wget -q -O - --header \"#{header}: $KEY\" http://10.0.2.2:#{port}/#{path}"]).stdout
      end
      assert_equal "ok", get.call("X-Api-Key", "named")
      assert_includes heads.pop, "\r\nX-Api-Key: #{value}\r\n"
      # Authorization is not one of its headers now: refused, and nothing
      # of that request leaves (a request that reached the server was
      # kept before its answer).
      refute_equal "ok", get.call("Authorization", "unnamed")
      assert heads.empty?
    end
    [["Host"], (0..16).map { |i| "X-#{i}" }].each do |headers|
      bad = Burrow::Secret.new(name: "KEY", value: value, hosts: ["127.0.0.1"], headers: headers)
      assert_raises(Burrow::InvalidConfigError) do
        Burrow::Sandbox.create("rb-secret-bad", image: IMAGE, network: true, secrets: [bad])
      end
    end
    bad = Burrow::Secret.new(name: "KEY", value: value, hosts: ["a.b"], headers: "X-Api-Key")
    assert_raises(TypeError) { Burrow::Sandbox.define("rb-secret-bad", image: IMAGE, network: true, secrets: [bad]) }
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("rb-secret-bad") }
  ensure
    server&.close
    thread&.kill
  end
end
