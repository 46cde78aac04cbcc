/* Prints the CPython struct offsets that cupti_inject/src/pyframes.c hard-codes, from the
 * interpreter's own headers: build with -I/usr/include/python3.X to check a new version. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <stddef.h>
#include <stdio.h>

int main(void) {
    printf("python %s\n", PY_VERSION);
    printf("tstate.cframe %zu cframe.current_frame %zu\n", offsetof(PyThreadState, cframe),
           offsetof(_PyCFrame, current_frame));
    printf("frame.f_code %zu previous %zu prev_instr %zu owner %zu\n",
           offsetof(_PyInterpreterFrame, f_code), offsetof(_PyInterpreterFrame, previous),
           offsetof(_PyInterpreterFrame, prev_instr), offsetof(_PyInterpreterFrame, owner));
    printf("code.co_filename %zu co_qualname %zu co_code_adaptive %zu\n",
           offsetof(PyCodeObject, co_filename), offsetof(PyCodeObject, co_qualname),
           offsetof(PyCodeObject, co_code_adaptive));
    printf("ascii %zu compact %zu compact.utf8 %zu\n", sizeof(PyASCIIObject),
           sizeof(PyCompactUnicodeObject), offsetof(PyCompactUnicodeObject, utf8));
    return 0;
}
