-- Reserved: version 9 comes from another line of work (the fair-queue flag).
-- This placeholder only keeps this branch's migrations numbered 1..n; it is
-- dropped when that version 9 is merged. It changes nothing.
SELECT 1;
