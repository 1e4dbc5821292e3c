# check_man.cmake -- keeps docs/dlock.3 in step with include/dlock.h: every
# DLOCK_API function of the header must appear in the manual page.
#   cmake -DHEADER=include/dlock.h -DPAGE=docs/dlock.3 -P check_man.cmake
file(STRINGS "${HEADER}" _api REGEX "^DLOCK_API ")
file(READ "${PAGE}" _page)
set(_missing "")
foreach(_line IN LISTS _api)
    if(_line MATCHES "(dlock_[a-z0-9_]+)\\(")
        string(FIND "${_page}" "${CMAKE_MATCH_1}(" _at)
        if(_at EQUAL -1)
            list(APPEND _missing "${CMAKE_MATCH_1}")
        endif()
    endif()
endforeach()
if(_missing)
    message(FATAL_ERROR "${PAGE} does not describe: ${_missing}")
endif()
