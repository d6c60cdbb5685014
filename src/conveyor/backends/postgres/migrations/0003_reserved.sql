-- Reserved: version 3 belongs to a change being made on another branch. This
-- placeholder keeps the versions numbered 1..n; it is replaced by that change.
SELECT 1;
