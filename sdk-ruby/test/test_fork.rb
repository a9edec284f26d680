# frozen_string_literal: true

# Forks of the Ruby SDK, against real sandboxes through the installed gem:
# a running sandbox copied into started sandboxes that hold its files,
# named in order, and the typed errors (a bad count, a taken name: no copy
# left; a stopped parent).
require_relative "fresh_home"

class TestFork < Minitest::Test
  include FreshHome

  def test_copies_are_started_with_the_parents_files
    parent = Burrow::Sandbox.create("rb-fork", image: IMAGE)
    parent.exec(["sh", "-c", "echo from-ruby > /kept && rm /bin/false"])
    assert Burrow::Sandbox.capabilities.fork

    copies = parent.fork(2)
    assert_equal %w[rb-fork-fork-1 rb-fork-fork-2], copies.map(&:name)
    assert_equal 3, [parent.id, *copies.map(&:id)].uniq.size
    copies.each do |c|
      assert_equal :running, c.info.status
      assert_equal "from-ruby\ngone\n", c.exec(["sh", "-c", "cat /kept; test -e /bin/false || echo gone"]).stdout
    end
    copies.first.exec(["sh", "-c", "echo mine > /kept"])
    assert_equal "from-ruby\n", parent.exec(%w[cat /kept]).stdout

    named = Burrow::Sandbox.get("rb-fork").fork(names: ["rb-fork-named"])
    assert_equal ["rb-fork-named"], named.map(&:name)
    assert_kind_of Burrow::Handle, named.first

    assert_raises(Burrow::InvalidArgumentError) { parent.fork(0) }
    assert_raises(Burrow::AlreadyExistsError) { parent.fork(names: %w[rb-fork-free rb-fork-named]) }
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("rb-fork-free") }
    assert_raises(TypeError) { parent.fork(names: "one-string") }

    copies.each(&:destroy)
    named.first.destroy
    parent.stop
    assert_raises(Burrow::InvalidStateError) { Burrow::Sandbox.get("rb-fork").fork }
    parent.destroy
  end
end
