# check_readme.cmake -- checks that the first ```c block of README.md is
# byte-identical to examples/readme_example.c, so the README shows code that
# compiles (examples/CMakeLists.txt builds readme_example.c).
#
#   cmake -DREADME=README.md -DEXAMPLE=examples/readme_example.c \
#         [-DOUT=readme_block.c] -P examples/check_readme.cmake
#
# The block is everything between the line "```c" and the next line that
# starts with "```", including the newline that ends its last line.
cmake_minimum_required(VERSION 3.16)

foreach(_v README EXAMPLE)
    if(NOT DEFINED ${_v})
        message(FATAL_ERROR "check_readme.cmake: -D${_v}=... is required")
    endif()
    if(NOT EXISTS "${${_v}}")
        message(FATAL_ERROR "check_readme.cmake: ${${_v}} does not exist")
    endif()
endforeach()

file(READ "${README}" _readme)
file(READ "${EXAMPLE}" _example)

# The opening fence: "```c" alone on its line, at the start of the file or
# after a newline.
set(_open "```c\n")
string(FIND "${_readme}" "\n${_open}" _at)
if(_at GREATER_EQUAL 0)
    math(EXPR _start "${_at} + 1 + 5")
else()
    string(LENGTH "${_open}" _olen)
    string(SUBSTRING "${_readme}" 0 ${_olen} _head)
    if(NOT _head STREQUAL _open)
        message(FATAL_ERROR "${README}: no ```c block found")
    endif()
    set(_start 5)
endif()

string(SUBSTRING "${_readme}" ${_start} -1 _rest)
string(FIND "${_rest}" "\n```" _end)
if(_end LESS 0)
    message(FATAL_ERROR "${README}: the first ```c block is not closed")
endif()
math(EXPR _len "${_end} + 1")
string(SUBSTRING "${_rest}" 0 ${_len} _block)

if(NOT _block STREQUAL _example)
    if(DEFINED OUT)
        file(WRITE "${OUT}" "${_block}")
        set(_hint "; the README's block is in ${OUT}: diff -u ${EXAMPLE} ${OUT}")
    else()
        set(_hint "")
    endif()
    message(FATAL_ERROR
        "the first ```c block of ${README} differs from ${EXAMPLE}: "
        "keep them byte-identical${_hint}")
endif()
message(STATUS "README.md's first ```c block is identical to ${EXAMPLE}")
