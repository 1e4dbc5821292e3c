-- fence_succ: fs = the decimal string ls plus one.  Fences are 19 digits,
-- beyond a Lua number's exact range (2^53), so the scripts never make a
-- number of one: they compare fences as text (digits, no leading zeros:
-- longer is larger) and add one to the text.
local i = #ls
while string.byte(ls, i) == 57 do i = i - 1 end
if i == 0 then fs = '1' .. string.rep('0', #ls)
else fs = string.sub(ls, 1, i - 1) .. string.char(string.byte(ls, i) + 1) .. string.rep('0', #ls - i) end
