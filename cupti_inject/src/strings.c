#define _GNU_SOURCE
#include "strings.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"

struct entry { uint64_t hash; char *text; uint32_t id; };
static struct entry *table;
static uint32_t cap, used, next_id = 1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t hash_text(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h ? h : 1;
}

static int grow(void) {
    uint32_t ncap = cap ? cap * 2 : 1024;
    struct entry *nt = calloc(ncap, sizeof *nt);
    if (!nt) return -1;
    for (uint32_t i = 0; i < cap; i++) {
        if (!table[i].id) continue;
        uint32_t j = (uint32_t)table[i].hash & (ncap - 1);
        while (nt[j].id) j = (j + 1) & (ncap - 1);
        nt[j] = table[i];
    }
    free(table);
    table = nt;
    cap = ncap;
    return 0;
}

uint32_t xp_intern(const char *text) {
    if (!text) text = "";
    uint64_t h = hash_text(text);
    pthread_mutex_lock(&lock);
    if (used * 2 >= cap && grow() != 0) { pthread_mutex_unlock(&lock); return 0; }
    uint32_t j = (uint32_t)h & (cap - 1);
    while (table[j].id) {
        if (table[j].hash == h && strcmp(table[j].text, text) == 0) {
            uint32_t id = table[j].id;
            pthread_mutex_unlock(&lock);
            return id;
        }
        j = (j + 1) & (cap - 1);
    }
    char *copy = strdup(text);
    if (!copy) { pthread_mutex_unlock(&lock); return 0; }
    uint32_t id = next_id++;
    table[j] = (struct entry){h, copy, id};
    used++;
    xp_emit_string(id, copy);
    pthread_mutex_unlock(&lock);
    return id;
}

void xp_strings_reset(void) {
    pthread_mutex_init(&lock, NULL); /* a forked child: whoever held it is not there */
    for (uint32_t i = 0; i < cap; i++) free(table[i].text);
    free(table);
    table = NULL;
    cap = used = 0;
    next_id = 1;
}

void xp_strings_lock(void) { pthread_mutex_lock(&lock); }
void xp_strings_unlock(void) { pthread_mutex_unlock(&lock); }
