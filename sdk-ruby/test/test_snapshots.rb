# frozen_string_literal: true

# Snapshots of the Ruby SDK, against real sandboxes through the installed
# gem: a running sandbox's files saved by name, a sandbox created from
# "snapshot:NAME", the store listed and cleaned, and the typed errors (a
# taken name, a bad one, a snapshot still in use).
require_relative "fresh_home"

class TestSnapshots < Minitest::Test
  include FreshHome

  def test_a_snapshot_is_an_image_of_what_the_sandbox_changed
    src = Burrow::Sandbox.create("rb-snap-src", image: IMAGE)
    src.exec(["sh", "-c", "echo from-ruby > /kept && rm /bin/false"])
    snap = src.snapshot("rb-base")
    assert_equal "rb-base", snap.name
    assert_equal :filesystem, snap.kind
    assert_equal "snapshot:rb-base", snap.image
    assert_match(/\Asha256:\h{64}\z/, snap.digest)
    assert_operator snap.size, :>, 0
    assert_equal src.id, snap.source_id
    assert_equal "rb-snap-src", snap.source_name
    assert_kind_of Time, snap.created_at
    assert_equal :running, src.info.status
    assert Burrow::Sandbox.capabilities.snapshots

    assert_raises(Burrow::AlreadyExistsError) { src.snapshot("rb-base") }
    assert_raises(Burrow::InvalidArgumentError) { src.snapshot("no/slash/x") }

    copy = Burrow::Sandbox.create("rb-snap-copy", image: snap.image)
    assert_equal "from-ruby\ngone\n", copy.exec(["sh", "-c", "cat /kept; test -e /bin/false || echo gone"]).stdout
    assert_equal ["rb-base"], Burrow::Sandbox.snapshots.map(&:name)
    assert_equal snap.digest, Burrow::Sandbox.get_snapshot("rb-base").digest
    err = assert_raises(Burrow::SnapshotInUseError) { Burrow::Sandbox.remove_snapshot("rb-base") }
    assert_equal "snapshot_in_use", err.code
    assert_equal ["rb-snap-copy"], err.sandboxes

    copy.destroy
    src.destroy
    Burrow::Sandbox.remove_snapshot("rb-base")
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get_snapshot("rb-base") }
    assert_empty Burrow::Sandbox.snapshots
  end
end
