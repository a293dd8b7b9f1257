// The header is the module; a C target needs one source file.
#include "CLoadEpoll.h"
