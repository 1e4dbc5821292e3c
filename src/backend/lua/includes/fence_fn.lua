-- fence_fn: the function fence(), the next fence of K[2] (fence) from the
-- clock read before (t, us).  Only the acquires' paths past the
-- uncontended one make it: a script makes its functions anew at every
-- run, and on the uncontended path and in a release that costs as much
-- as a call, so those write the statements out.
local function fence()
  local fk = K[2]
  --- @include "fence"
  return fs
end
