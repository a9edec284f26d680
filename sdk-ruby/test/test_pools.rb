# frozen_string_literal: true

# Warm pools of the Ruby SDK, against real sandboxes through the installed
# gem: a pool defined with a create's options, a create of its
# configuration claiming one of its running sandboxes (the creator's name,
# labels and env), the counts, a scale and a removal, and the typed errors.
require_relative "fresh_home"

class TestPools < Minitest::Test
  include FreshHome

  def test_a_create_claims_a_running_sandbox_of_a_pool
    assert Burrow::Sandbox.capabilities.pools
    pool = Burrow::Sandbox.create_pool("rb-pool", 1, image: IMAGE, env: { "POOLED" => "yes" })
    assert_kind_of Burrow::PoolInfo, pool
    assert_equal ["rb-pool", 1, 1, 0, 0, 0], [pool.name, pool.size, pool.warm, pool.starting, pool.claims, pool.misses]
    assert_equal({ "POOLED" => "yes" }, pool.config.env)
    assert_kind_of Float, pool.config.startup_timeout
    assert_operator pool.last_refill, :>=, 0
    assert_kind_of Time, pool.created_at
    # Warm sandboxes are nobody's: not listed.
    assert_empty Burrow::Sandbox.list.sandboxes

    sb = Burrow::Sandbox.create("rb-claimed", image: IMAGE, env: { "POOLED" => "yes", "TASK" => "7" },
                                              labels: { "team" => "rb" })
    info = sb.info
    assert_equal ["rb-claimed", :running], [info.name, info.status]
    assert_equal({ "team" => "rb" }, info.config.labels)
    assert_equal "yes 7\n", sb.exec(["sh", "-c", "echo $POOLED $TASK"]).stdout
    claimed = Burrow::Sandbox.get_pool("rb-pool")
    assert_equal [1, 0], [claimed.claims, claimed.misses]
    assert_equal ["rb-claimed"], Burrow::Sandbox.list.sandboxes.map(&:name)

    defined = Burrow::Sandbox.define("rb-defined", image: IMAGE, env: { "POOLED" => "yes" })
    assert_equal :created, defined.info.status
    assert_equal 1, Burrow::Sandbox.get_pool("rb-pool").claims

    err = assert_raises(Burrow::AlreadyExistsError) { Burrow::Sandbox.create_pool("rb-pool", 1, image: IMAGE) }
    assert_equal "already_exists", err.code
    assert_raises(Burrow::InvalidNameError) { Burrow::Sandbox.create_pool("no/slash/x", 1, image: IMAGE) }
    assert_raises(Burrow::InvalidArgumentError) { Burrow::Sandbox.create_pool("rb-big", 65, image: IMAGE) }
    assert_raises(Burrow::InvalidConfigError) do
      Burrow::Sandbox.create_pool("rb-labelled", 1, image: IMAGE, labels: { "k" => "v" })
    end
    assert_raises(Burrow::InvalidArgumentError) { Burrow::Sandbox.scale_pool("rb-pool", 65) }
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.scale_pool("rb-nope", 1) }
    assert_equal ["rb-pool"], Burrow::Sandbox.list_pools.map(&:name)

    scaled = Burrow::Sandbox.scale_pool("rb-pool", 0)
    assert_equal [0, 0, 0], [scaled.size, scaled.warm, scaled.starting]
    assert_nil Burrow::Sandbox.remove_pool("rb-pool")
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get_pool("rb-pool") }
    assert_empty Burrow::Sandbox.list_pools
    # The claimed sandbox is an ordinary one now.
    assert_equal :running, sb.info.status
  end
end
