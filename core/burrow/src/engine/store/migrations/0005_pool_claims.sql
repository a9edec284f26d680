-- A claim in two steps: a running warm sandbox is first reserved for its
-- claimer (this column: the claiming process, `<pid>:<start time>`) and
-- given the claimer's configuration, then takes the claimer's name, which
-- clears `pool` and this column. A refill removes a reservation whose
-- claimer died between the steps.
ALTER TABLE sandboxes ADD COLUMN claimer TEXT;
